"""autograder.checks.nb07_by_hand: the model is the one the notebook describes, the references are
PyTorch's, the guards refuse what "by hand" excludes, every check accepts right answers and names
the slip of wrong ones, trusted grading gives the same verdicts, and notebook 07's quiz follows the
schema with every numeric and short answer computed here."""
import math
import pathlib
from unittest import mock

import mutants
import mutation
import pytest
import torch
import torch.nn.functional as F
import yaml
from mutants import nb07_by_hand as catalogue
from torch import nn

from autograder import checks
from autograder.checks import GradingError
from autograder.checks import nb07_by_hand as bh
from autograder.checks.nb07_by_hand import steps
from autograder.checks.nb07_by_hand.batchnorm import BN_SLIPS, FLOAT32_SHARE, bn_grads, reference_batchnorm_backward
from autograder.checks.nb07_by_hand.calls import guarded
from autograder.checks.nb07_by_hand.embedding import reference_embedding_backward
from autograder.checks.nb07_by_hand.manual_backward import MODEL_SLIPS, reference_grads
from autograder.checks.nb07_by_hand.model import PARAM_NAMES, forward, init_params, slipped_loss
from autograder.checks.nb07_by_hand.running_stats import reference_running
from autograder.checks.nb07_by_hand.steps import STEP_GRADS, batchnorm_steps, reference_steps
from autograder.checks.nb07_by_hand.training import twin_training
from autograder.learner import quiz_schema
from autograder.learner.device import available_devices

QUIZ = pathlib.Path(bh.__file__).resolve().parents[2] / "learner" / "quizzes" / "07_by_hand.yaml"


@pytest.fixture(params=available_devices())
def device(request):
    return torch.device(request.param)


def nn_model(params):
    """The notebook's model built from torch.nn modules, loaded with `params`."""
    C, W1, b1, gamma, beta, W2, b2 = (params[n] for n in PARAM_NAMES)
    embed = nn.Embedding(*C.shape).to(C)
    first, second = nn.Linear(*W1.shape).to(W1), nn.Linear(*W2.shape).to(W2)
    norm = nn.BatchNorm1d(W1.shape[1]).to(W1)
    with torch.no_grad():
        embed.weight.copy_(C)
        first.weight.copy_(W1.T), first.bias.copy_(b1)
        norm.weight.copy_(gamma), norm.bias.copy_(beta)
        second.weight.copy_(W2.T), second.bias.copy_(b2)
    modules = [embed, first, norm, second]
    return modules, lambda tokens: second(torch.tanh(norm(first(embed(tokens).flatten(1)))))


# --- the model ------------------------------------------------------------------------------------------
def test_forward_is_embedding_linear_batchnorm_tanh_linear_cross_entropy(device):
    case = bh.model_case(9, 3, 4, 6, 7, seed=3, device=device)
    modules, run = nn_model(case["params"])
    expected = F.cross_entropy(run(case["tokens"]), case["targets"])
    loss, cache = forward(case["params"], case["tokens"], case["targets"])
    torch.testing.assert_close(loss, expected)
    grads = reference_grads(**case)
    expected.backward()
    embed, first, norm, second = modules
    for name, g in [("C", embed.weight.grad), ("W1", first.weight.grad.T), ("b1", first.bias.grad),
                    ("gamma", norm.weight.grad), ("beta", norm.bias.grad), ("W2", second.weight.grad.T),
                    ("b2", second.bias.grad)]:
        torch.testing.assert_close(grads[name], g, msg=name)
    assert set(cache) >= {"tokens", "emb", "x", "h", "x_hat", "rstd", "a", "logits", "logp"}
    assert cache["emb"].shape == (7, 3, 4) and cache["x"].shape == (7, 12) and cache["logp"].shape == (7, 9)


def test_init_params_starts_near_log_vocab_and_draws_alike_on_every_device(device):
    params = init_params(23, 2, 16, 64, seed=0, device=device)
    assert torch.equal(params["gamma"], torch.ones(64, device=device))
    assert not params["b1"].any() and not params["beta"].any() and not params["b2"].any()
    cpu = init_params(23, 2, 16, 64, seed=0, device="cpu")
    assert all(torch.equal(params[n].cpu(), cpu[n]) for n in PARAM_NAMES)
    tokens = torch.randint(0, 23, (64, 2), generator=torch.Generator().manual_seed(1)).to(device)
    loss, _ = forward(params, tokens, tokens.sum(1) % 23)
    assert abs(loss.item() - math.log(23)) < 0.05


def test_the_slipped_loss_without_a_slip_is_the_forward_loss():
    case = bh.model_case(7, 2, 3, 5, 6, seed=4)
    leaves = {n: p.clone().requires_grad_() for n, p in case["params"].items()}
    torch.testing.assert_close(slipped_loss(leaves, case["tokens"], case["targets"], None),
                               forward(leaves, case["tokens"], case["targets"])[0])


def test_every_slip_changes_the_gradients():
    case = bh.model_case(7, 2, 3, 5, 6, seed=5)
    right = reference_grads(**case)
    for slip in MODEL_SLIPS:
        slipped = reference_grads(**case, slip=slip)
        assert any(not torch.allclose(slipped[n], right[n]) for n in PARAM_NAMES), slip
    bn = bh.batchnorm_case(6, 4, seed=6, tiny=(1,))
    for slip in BN_SLIPS:
        assert not torch.allclose(bn_grads(*bn.values(), slip)[0], reference_batchnorm_backward(*bn.values())[0])


# --- cases and references ------------------------------------------------------------------------------
def test_cases_have_what_the_hidden_tests_promise(device):
    emb = bh.embedding_case((6, 3), 4, 20, seed=14, high=5, device=device)
    counts = torch.bincount(emb["idx"].flatten(), minlength=20)
    assert (counts > 1).any() and (counts[5:] == 0).all() and emb["dout"].shape == (6, 3, 4)
    assert bh.embedding_case((), 3, 5, seed=1, device=device)["idx"].dim() == 0
    bn = bh.batchnorm_case(8, 3, seed=5, tiny=(0, 1), device=device)
    var = bn["x"].var(0, unbiased=False)
    assert var[0] < 1e-5 < var[2] and 1e-6 < var[1] < 1e-4
    model = bh.model_case(11, 3, 2, 8, 9, seed=61, device=device)
    assert torch.bincount(model["tokens"].flatten()).max() > 1
    assert all(p.dtype == torch.float64 and p.device.type == device.type for p in model["params"].values())


def test_batchnorm_steps_is_batchnorm_and_its_paths_add_up(device):
    """The course's line-by-line forward is F.batch_norm's; autograd through it gives F.batch_norm's
    gradients; and the one-path gradients the hints use add up to the whole (so that "only the path
    through x_hat" means what it says)."""
    case = bh.steps_case(7, 3, seed=3, tiny=(1,), device=device)
    y, cache = batchnorm_steps(case["x"], case["gamma"], torch.zeros_like(case["gamma"]), case["eps"])
    torch.testing.assert_close(y, F.batch_norm(case["x"], None, None, case["gamma"], None, training=True,
                                               eps=case["eps"]))
    assert set(cache) == {"x", "mean", "c", "sq", "var", "rstd", "x_hat"}
    lines = reference_steps(*case.values())
    assert list(lines) == list(STEP_GRADS)
    for name, want in zip(["dx", "dgamma", "dbeta"], reference_batchnorm_backward(*case.values())):
        torch.testing.assert_close(lines[name], want)
    for line, cuts in [("dc", ("sq", "x_hat")), ("dx", ("mean", "c"))]:
        first, second = (steps._one_path(case, line, cut) for cut in cuts)
        torch.testing.assert_close(first + second, lines[line])
        assert not torch.allclose(first, lines[line]) and not torch.allclose(second, lines[line])


def test_steps_cases_have_what_the_hidden_tests_promise(device):
    tiny = bh.steps_case(8, 3, seed=85, tiny=(1,), device=device)
    var = tiny["x"].var(0, unbiased=False)
    assert var[1] < 1e-5 < var[0] and var[2] > 1e-5
    one = bh.steps_case(1, 4, seed=81, device=device)
    lines = reference_steps(*one.values())
    assert all(torch.isfinite(g).all() for g in lines.values())
    assert not lines["dx"].any() and lines["dc"].abs().min() > 1  # c = 0: the gradient stops at x
    assert bh.steps_case(6, 4, seed=2, dtype=torch.float32, device=device)["x"].dtype == torch.float32


def test_the_eps_hints_name_eps_left_out_or_written_in():
    """Leaving eps out of r's derivative changes only columns whose variance is near eps: named as eps left
    out. A number written in for eps (Karpathy's `(var + 1e-5) ** -1.5`) is right where the layer's eps is
    1e-5 and named where it is not, as is the fused function's eps argument ignored, within the first 500
    characters (what class grading keeps)."""
    with pytest.raises(GradingError) as err:
        bh.check_batchnorm_steps("batchnorm_steps_backward", catalogue.st_eps_left_out,
                                 [bh.steps_case(5, 5, seed=3, tiny=(0, 3), device="cpu")])
    assert str(err.value).startswith("batchnorm_steps_backward: dvar is wrong: its values differ from autograd's "
                                     "gradient of var\n  hint: dvar leaves eps out")
    bh.check_batchnorm_steps("batchnorm_steps_backward", catalogue.st_typed_eps,
                             [bh.steps_case(5, 5, seed=3, tiny=(0, 3), device="cpu")])
    for eps, shown in [(1e-3, "1e-3"), (0.1, "0.1")]:
        with pytest.raises(GradingError) as err:
            bh.check_batchnorm_steps("batchnorm_steps_backward", catalogue.st_typed_eps,
                                     [bh.steps_case(5, 3, seed=4, eps=eps, device="cpu")])
        assert f"hint: your answer uses eps = 1e-5 where the layer's eps is {shown}" in str(err.value)[:500]
    with pytest.raises(GradingError) as err:
        bh.check_batchnorm_backward("batchnorm_backward", catalogue.bn_typed_eps,
                                    [bh.batchnorm_case(9, 5, seed=33, tiny=(4,), eps=1e-3, device="cpu")])
    assert "your answer uses eps = 1e-5 where the layer's eps is 1e-3" in str(err.value)[:500]


def test_a_steps_answer_that_reads_a_global_eps_is_told_it_is_not_an_argument():
    def uses_eps(dout, cache, gamma):
        return {"dvar": -0.5 * (cache["var"] + eps) ** -1.5}  # noqa: F821 - the slip: no eps here

    with pytest.raises(GradingError) as err:
        bh.check_batchnorm_steps("batchnorm_steps_backward", uses_eps, [bh.steps_case(5, 3, seed=4, device="cpu")])
    assert "raised NameError: name 'eps' is not defined" in str(err.value)
    assert "hint: eps is not an argument of batchnorm_steps_backward" in str(err.value)


def test_references_are_pytorchs(device):
    case = bh.embedding_case((4, 3), 2, 9, seed=2, device=device)
    manual = torch.zeros(9, 2, dtype=torch.float64, device=device).index_add_(0, case["idx"].flatten(),
                                                                               case["dout"].reshape(-1, 2))
    torch.testing.assert_close(reference_embedding_backward(*case.values()), manual)

    case = bh.batchnorm_case(7, 3, seed=3, device=device)
    norm = nn.BatchNorm1d(3, dtype=torch.float64, device=device)
    with torch.no_grad():
        norm.weight.copy_(case["gamma"])
    x = case["x"].clone().requires_grad_()
    norm(x).backward(case["dout"])
    expected = (x.grad, norm.weight.grad, norm.bias.grad)
    for got, want in zip(reference_batchnorm_backward(*case.values()), expected):
        torch.testing.assert_close(got, want)

    for shape in [(5, 3), (2, 3, 4)]:
        case = bh.running_case(shape, 0.3, seed=4, device=device)
        norm = nn.BatchNorm1d(3, momentum=0.3, dtype=torch.float64, device=device)
        with torch.no_grad():
            norm.running_mean.copy_(case["running_mean"]), norm.running_var.copy_(case["running_var"])
        norm(case["x"])
        mean, var = reference_running(*case.values())
        torch.testing.assert_close(mean, norm.running_mean)
        torch.testing.assert_close(var, norm.running_var)


def test_the_autograd_twin_is_sgd_with_autograds_gradients():
    case = bh.training_case(6, 2, 3, 4, 5, 2, 3, 0.2, seed=8)
    leaves = {n: p.clone().requires_grad_() for n, p in case["params"].items()}
    opt = torch.optim.SGD(leaves.values(), lr=0.2)
    losses = []
    for step in range(3):
        opt.zero_grad()
        loss, _ = forward(leaves, *case["data"][step % 2])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    twin_losses, twin = twin_training(*case.values())
    assert twin_losses == pytest.approx(losses, rel=1e-12)
    assert all(torch.allclose(twin[n], leaves[n]) for n in PARAM_NAMES)


# --- guards ----------------------------------------------------------------------------------------------
def refusal(fn, *args):
    with pytest.raises(GradingError) as err:
        guarded("exercise", fn, list(args), {"x": args[0]})
    return str(err.value)


def test_guards_refuse_autograd_batchnorm_and_backward_kernels_however_reached():
    x = torch.randn(4, 3, dtype=torch.float64)
    gamma = torch.ones(3, dtype=torch.float64)
    assert "called autograd" in refusal(lambda t: t.clone().requires_grad_().sum().backward(), x)
    assert "torch.nn.functional.batch_norm" in refusal(lambda t: F.batch_norm(t, None, None, training=True), x)
    assert "BatchNorm kernel aten::native_batch_norm" in refusal(
        lambda t: torch.batch_norm(t, None, None, None, None, True, 0.1, 1e-5, False), x)
    assert "BatchNorm" in refusal(lambda t: nn.BatchNorm1d(3, dtype=torch.float64)(t), x)
    mean, invstd = x.mean(0), (x.var(0, unbiased=False) + 1e-5).rsqrt()
    assert "backward kernel aten::native_batch_norm_backward" in refusal(
        lambda t: torch.ops.aten.native_batch_norm_backward(t, x, gamma, None, None, mean, invstd, True, 1e-5,
                                                            [True, True, True]), x)
    assert "backward kernel aten::tanh_backward" in refusal(lambda t: torch.ops.aten.tanh_backward(t, t.tanh()), x)


def test_guards_let_plain_arithmetic_through_and_give_private_copies():
    x = torch.randn(4, 3, dtype=torch.float64)
    state = {"w": torch.ones(3, dtype=torch.float64)}

    def scribble(t, d):
        d["w"].add_(1)
        t.mul_(0)
        return t.sum() + d["w"].sum()

    before = x.clone()
    assert guarded("exercise", scribble, [x, state], {}).item() == 6.0
    assert torch.equal(x, before) and torch.equal(state["w"], torch.ones(3, dtype=torch.float64))
    assert torch._C._len_torch_dispatch_stack() == 0, "the kernel watch was left switched on"


# --- checks: right answers pass, slips are named ------------------------------------------------------------
def cases(device):
    return {
        "embedding_backward": (bh.check_embedding_backward,
                               [bh.embedding_case((), 3, 5, seed=1, device=device),
                                bh.embedding_case((6, 3), 4, 20, seed=2, high=5, device=device),
                                bh.embedding_case((2, 3, 2), 2, 7, seed=3, device=device)]),
        "batchnorm_steps_backward": (bh.check_batchnorm_steps,
                                     [bh.steps_case(6, 4, seed=1, device=device),
                                      bh.steps_case(1, 3, seed=2, device=device),
                                      bh.steps_case(5, 5, seed=3, tiny=(0, 3), device=device),
                                      bh.steps_case(5, 3, seed=4, eps=1e-3, device=device)]),
        "batchnorm_backward": (bh.check_batchnorm_backward,
                               [bh.batchnorm_case(6, 4, seed=1, device=device),
                                bh.batchnorm_case(5, 5, seed=2, device=device),
                                bh.batchnorm_case(9, 3, seed=3, tiny=(0, 2), device=device),
                                bh.batchnorm_case(7, 4, seed=4, eps=0.1, device=device)]),
        "batchnorm_update_running": (bh.check_running,
                                     [bh.running_case((6, 4), 0.3, seed=1, device=device),
                                      bh.running_case((3, 4, 5), 0.2, seed=2, device=device)]),
        "manual_backward": (bh.check_manual_backward,
                            [bh.model_case(7, 2, 3, 5, 6, seed=1, device=device),
                             bh.model_case(5, 1, 4, 3, 2, seed=2, device=device)]),
        "train_by_hand": (bh.check_train_by_hand,
                          [bh.training_case(7, 2, 3, 5, 6, 2, 4, 0.3, seed=1, device=device)]),
    }


RIGHT = ["st_keepdim", "st_eps_from_cache", "bn_op_by_op", "bn_means", "emb_one_hot", "emb_index_put", "emb_loop",
         "emb_scatter_add", "run_lerp", "run_sums", "mb_op_by_op", "tbh_rebinds_entries", "tbh_sub_alpha"]


def name_of(entry):
    return {"st": "batchnorm_steps_backward", "bn": "batchnorm_backward", "emb": "embedding_backward",
            "run": "batchnorm_update_running",
            "mb": "manual_backward", "tbh": "train_by_hand"}[entry.split("_")[0]]


@pytest.mark.parametrize("entry", RIGHT)
def test_checks_accept_right_answers_written_differently(entry, device):
    check, case_list = cases(device)[name_of(entry)]
    check(name_of(entry), getattr(catalogue, entry), case_list)


SLIPS = {
    "st_no_sq_path": "dc holds only the path through x_hat",
    "st_no_mean_path": "dx holds only the path through c",
    "st_mean_path_not_divided": "the path through mean is N = 6 times too large",
    "st_power_factor": "dvar is wrong: its values differ from autograd's gradient of var",
    "st_eps_left_out": "dvar leaves eps out",
    "st_typed_eps": "dvar is wrong: its values differ from autograd's gradient of var\n  hint: your answer uses eps = "
                    "1e-5 where the layer's eps is 1e-3",
    "st_dsq_not_divided": "dsq is wrong: its values differ",
    "st_dsq_unbiased": "N/(N - 1) times too large",
    "st_dmean_sign": "its sign is flipped",
    "st_dr_not_summed": "drstd is wrong: it has shape (6, 4), expected (4,)",
    "st_dxhat_without_gamma": "dx_hat lacks the factor gamma",
    "st_autograd": "called autograd",
    "st_scales_dout_in_place": "fails for an expanded dout",
    "st_float64_lines": "dbeta is wrong: it has dtype torch.float64, expected torch.float32",
    "bn_no_statistics_terms": "gamma * rstd * dout",
    "bn_no_mean_term": "constant in each channel",
    "bn_no_variance_term": "multiple of x_hat",
    "bn_unbiased_variance": "unbiased variance",
    "bn_wrong_axis": "sum over the batch (dim 0)",
    "bn_swapped": "swapped",
    "bn_eps_outside": "eps in another place",
    "bn_no_gamma": "lacks the factor gamma",
    "bn_typed_eps": "wrong values in dx\n  hint: your answer uses eps = 1e-5 where the layer's eps is 0.1: use the eps "
                    "argument",
    "bn_calls_f_batch_norm": "called torch.nn.functional.batch_norm",
    "bn_autograd": "called autograd",
    "bn_aten_kernel": "backward kernel aten::native_batch_norm_backward",
    "emb_plus_equals": "repeated indices must add up",
    "emb_assign": "repeated indices must add up",
    "emb_rows_from_max": "it must have num_embeddings",
    "emb_default_dtype": "dtype torch.float32",
    "emb_assumes_two_dims": "raised ValueError",
    "emb_autograd": "called autograd",
    "emb_aten_kernel": "aten::embedding_dense_backward",
    "emb_grad_fn_apply": "'NoneType' object is not callable",
    "run_biased": "uses the biased variance",
    "run_momentum_swapped": "momentum convention",
    "run_in_place": "in place",
    "run_batch_dim_only": "raised RuntimeError",
    "run_wrong_divisor": "not N - 1",
    "run_fixed_momentum": "use the momentum argument",
    "run_f_batch_norm": "called torch.nn.functional.batch_norm",
    "mb_not_divided": "N times too large",
    "mb_no_one_hot": "lacks the -1",
    "mb_tanh_slope_from_input": "from the output a",
    "mb_bn_without_statistics": "terms from the mean and the variance",
    "mb_embedding_assign": "repeated indices must add up",
    "mb_without_b1": "no gradient for b1",
    "mb_autograd": "called autograd",
    "tbh_ascends": "move uphill",
    "tbh_first_batch": "first batch",
    "tbh_no_update": "never change",
    "tbh_update_mid_backward": "step 0 agrees",
    "tbh_tensor_losses": "list of Python floats",
    "tbh_loss_after_update": "after the update",
    "tbh_autograd": "called autograd",
    "bn_one_pass_variance": "fails for float32 input whose mean is about 1000 times its spread",
    "bn_scales_dout_in_place": "fails for an expanded dout",
    "bn_float32_accumulators": "dgamma has dtype torch.float32, expected torch.float64",
    "emb_view_dout": "fails for a non-contiguous dout: .view needs contiguous memory",
    "emb_view_idx": "fails for a non-contiguous idx: .view needs contiguous memory",
    "mb_softmax_without_max": "fails for float32 logits as large as a few hundred",
    "mb_float32_gradients": "the gradient of b2 has dtype torch.float32, expected torch.float64",
    "mb_view_tokens": "fails for a non-contiguous batch of tokens: .view needs contiguous memory",
}


def stressed(device):
    """{entry: check options} for the slips that only a stress of the battery shows (the hidden tests' cases)."""
    return {
        "st_scales_dout_in_place": dict(cases=[bh.steps_case(6, 4, seed=2, device=device)], stress="expanded"),
        "st_float64_lines": dict(cases=[bh.steps_case(6, 4, seed=2, dtype=torch.float32, device=device)]),
        "bn_one_pass_variance": dict(cases=[bh.batchnorm_case(16, 5, seed=26, large_mean=True, device=device)],
                                     stress="float32-large-mean"),
        "bn_scales_dout_in_place": dict(cases=[bh.batchnorm_case(6, 4, seed=29, device=device)], stress="expanded"),
        "emb_view_dout": dict(cases=[bh.embedding_case((6, 3), 4, 20, seed=18, high=5, device=device)],
                              stress="non-contiguous"),
        "emb_view_idx": dict(cases=[bh.embedding_case((5, 2), 3, 8, seed=20, device=device)],
                             stress="non-contiguous", what="idx"),
        "mb_softmax_without_max": dict(cases=[bh.model_case(7, 2, 3, 5, 6, seed=65, logits_scale=500.0,
                                                            device=device)], stress="large-logits"),
        "mb_view_tokens": dict(cases=[bh.model_case(9, 2, 3, 6, 5, seed=67, device=device)], stress="non-contiguous"),
    }


def test_every_entry_of_the_catalogue_is_tested_here():
    entries = mutants.load_all()[catalogue.NB].values()
    assert {fn.__name__ for kinds in entries for _, fn in kinds["wrong"]} == set(SLIPS)
    assert {fn.__name__ for kinds in entries for _, fn in kinds["right"]} == set(RIGHT)


@pytest.mark.parametrize("entry", sorted(SLIPS))
def test_checks_name_the_slip(entry, device):
    check, case_list = cases(device)[name_of(entry)]
    options = stressed(device).get(entry, {"cases": case_list})
    with pytest.raises(GradingError) as err:
        check(name_of(entry), getattr(catalogue, entry), **options)
    assert SLIPS[entry] in str(err.value)


def test_the_stressed_slips_pass_the_ordinary_cases(device):
    """Each slip of the battery is right-looking code: the ordinary cases accept it, only its stress
    shows it (the dtype slips are named, not stressed)."""
    for entry in stressed(device):
        check, case_list = cases(device)[name_of(entry)]
        check(name_of(entry), getattr(catalogue, entry), case_list)


STRESSES = {  # graded name: [check options] of the hidden tests' stresses
    "batchnorm_steps_backward": [dict(stress="expanded"), dict(stress="non-contiguous")],
    "embedding_backward": [dict(stress="non-contiguous"), dict(stress="non-contiguous", what="idx"),
                           dict(stress="expanded")],
    "batchnorm_backward": [dict(stress="expanded"), dict(stress="non-contiguous", what="x")],
    "batchnorm_update_running": [dict(stress="non-contiguous")],
    "manual_backward": [dict(stress="non-contiguous")],
}


@pytest.mark.parametrize("entry", RIGHT)
def test_right_answers_pass_every_stress(entry, device):
    check, case_list = cases(device)[name_of(entry)]
    for options in STRESSES.get(name_of(entry), []):
        check(name_of(entry), getattr(catalogue, entry), case_list, **options)
    if name_of(entry) == "batchnorm_backward":
        large = [bh.batchnorm_case(n, c, seed=k, large_mean=True, device=device) for n, c, k in [(16, 5, 6), (7, 6, 2)]]
        check(name_of(entry), getattr(catalogue, entry), large, stress="float32-large-mean")
    if name_of(entry) == "manual_backward":
        check(name_of(entry), getattr(catalogue, entry),
              [bh.model_case(7, 2, 3, 5, 6, seed=65, logits_scale=500.0, device=device)], stress="large-logits")


def test_float32_tolerance_lies_between_the_two_variances():
    """FLOAT32_SHARE: on the hidden tests' large-mean cases the two-pass variance's BatchNorm backward
    stays 10x below it, the one-pass one 10x above it; both are exact enough in float64."""
    for n, c, seed in [(16, 5, 26), (64, 3, 27), (7, 6, 28)]:
        case = bh.batchnorm_case(n, c, seed=seed, large_mean=True, device="cpu")
        assert case["x"].dtype == torch.float32 and (case["x"].mean(0) / case["x"].std(0)).min() > 300
        reference = reference_batchnorm_backward(*(v.double() if torch.is_tensor(v) else v for v in case.values()))

        def share(entry):
            got = getattr(catalogue, entry)(*case.values())
            return max(((g.double() - e).abs().max() / e.abs().max()).item() for g, e in zip(got, reference))
        assert share("bn_op_by_op") < FLOAT32_SHARE / 10 and share("bn_means") < FLOAT32_SHARE / 10
        assert share("bn_one_pass_variance") > FLOAT32_SHARE * 10


def test_large_logits_cases_reach_a_few_hundred_in_float32():
    case = bh.model_case(11, 3, 4, 8, 9, seed=66, logits_scale=300.0, device="cpu")
    logits = forward(**case)[1]["logits"]
    assert logits.dtype == torch.float32 and logits.abs().max().item() == pytest.approx(300.0, rel=1e-4)
    assert torch.isnan(logits.exp() / logits.exp().sum(1, keepdim=True)).any()  # without the max: inf / inf


def test_a_wrong_dtype_is_named_before_any_value_hint():
    """A float32 answer right to float32's precision once "matched" a slip (the tanh's slope from its
    input): the dtype comes first now, and no slip is named."""
    with pytest.raises(GradingError) as err:
        bh.check_manual_backward("manual_backward", catalogue.mb_float32_gradients,
                                 [bh.model_case(7, 2, 3, 5, 6, seed=1, device="cpu")])
    assert "dtype torch.float32, expected torch.float64" in str(err.value) and "hint" not in str(err.value)
    with pytest.raises(GradingError) as err:
        bh.check_embedding_backward("embedding_backward", catalogue.emb_rows_from_max,
                                    [bh.embedding_case((6, 3), 4, 20, seed=2, high=5, device="cpu")])
    assert "has shape" in str(err.value) and "hint: your table has 5 rows" in str(err.value)  # a shape hint stays


SEEN = []


def probe_layout(dout, idx, num_embeddings):
    """A right answer that records how its arguments reached it."""
    SEEN.append((dout.is_contiguous(), idx.is_contiguous(), dout.stride(0)))
    return catalogue.emb_index_put(dout, idx, num_embeddings)


@pytest.mark.parametrize("mode", ["plain", "trusted"])
def test_strided_and_expanded_arguments_reach_the_answer_as_such(mode):
    """Every copy on the way makes a tensor contiguous again; the driver lays it out where the answer runs."""
    case = "nb07_by_hand.embedding_case((4, 3), 2, 6, seed=21, device='cpu')"
    layouts = [("stress='non-contiguous'", (False, True)), ("stress='non-contiguous', what='idx'", (True, False)),
               ("stress='expanded'", None)]
    for options, seen in layouts:
        SEEN.clear()
        source = ("from autograder.checks import nb07_by_hand\n"
                  f"nb07_by_hand.check_embedding_backward('e', g, [{case}], {options})\n")
        err = mutation._run_cell(source, "test", {"__name__": "__main__", "g": probe_layout}, mode == "trusted")
        assert err is None and SEEN, (options, err)
        if seen is None:
            assert SEEN[0][2] == 0  # rows share memory
        else:
            assert SEEN[0][:2] == seen


# --- trusted grading ------------------------------------------------------------------------------------------
CELL = """
from autograder.checks import nb07_by_hand
nb07_by_hand.check_{check}("{name}", g, [{case}])
"""
TRUSTED = {
    "batchnorm_steps_backward": ("batchnorm_steps", "nb07_by_hand.steps_case(6, 4, seed=1, device='cpu')"),
    "embedding_backward": ("embedding_backward",
                           "nb07_by_hand.embedding_case((6, 3), 4, 20, seed=2, high=5, device='cpu')"),
    "batchnorm_backward": ("batchnorm_backward", "nb07_by_hand.batchnorm_case(6, 4, seed=1, device='cpu')"),
    "batchnorm_update_running": ("running", "nb07_by_hand.running_case((3, 4, 5), 0.2, seed=2, device='cpu')"),
    "manual_backward": ("manual_backward", "nb07_by_hand.model_case(7, 2, 3, 5, 6, seed=1, device='cpu')"),
    "train_by_hand": ("train_by_hand", "nb07_by_hand.training_case(7, 2, 3, 5, 6, 2, 4, 0.3, seed=1, device='cpu')"),
}


def run_trusted(name, implementation):
    """A check run as trusted grading runs it: the answer `g` is a stand-in reached through data-only
    calls (mutation's in-process kernel); returns the error (None if it passed) and every answer."""
    check, case = TRUSTED[name]
    answers = []

    class Recording(mutation.Loopback):
        def call(self, exercise, fn, args, options):
            answers.append(super().call(exercise, fn, args, options))
            return answers[-1]

    with mock.patch.object(mutation, "Loopback", Recording):
        err = mutation._run_cell(CELL.format(check=check, name=name, case=case), "test",
                                 {"__name__": "__main__", "g": implementation}, True)
    return err, answers


def only_data(value):
    if isinstance(value, (list, tuple)):
        return all(only_data(v) for v in value)
    if isinstance(value, dict):
        return all(only_data(v) for v in value.values())
    return value is None or isinstance(value, (torch.Tensor, int, float, str))


@pytest.mark.parametrize("entry", ["st_keepdim", "bn_op_by_op", "emb_one_hot", "run_lerp", "mb_op_by_op",
                                   "tbh_sub_alpha"])
def test_trusted_grading_passes_right_answers_and_only_data_comes_back(entry):
    err, answers = run_trusted(name_of(entry), getattr(catalogue, entry))
    assert err is None and answers and all(only_data(a) for a in answers)


@pytest.mark.parametrize("entry", ["st_no_sq_path", "bn_no_mean_term", "emb_plus_equals", "run_biased",
                                   "mb_not_divided", "tbh_ascends", "tbh_autograd", "run_in_place"])
def test_trusted_grading_gives_the_plain_verdict(entry):
    err, _ = run_trusted(name_of(entry), getattr(catalogue, entry))
    assert isinstance(err, GradingError) and SLIPS[entry] in str(err)


def test_an_answer_that_raises_in_the_kernel_is_shown_its_input_too():
    def crashes(dout, x, gamma, eps=1e-5):
        return dout @ x

    err, _ = run_trusted("batchnorm_backward", crashes)
    assert isinstance(err, GradingError) and str(err).startswith("batchnorm_backward: raised RuntimeError")
    assert "\n  on input:\n    dout = tensor(shape=(6, 4)" in str(err)


# --- the quiz of notebook 07 --------------------------------------------------------------------------------
def quiz_questions():
    raw = yaml.safe_load(QUIZ.read_text())
    return raw, [(section, q) for section, body in raw["sections"].items() for q in body["questions"]]


def test_quiz_file_follows_the_schema():
    """The course's schema reads it (every field checked there); what is 07's own is checked here: the
    derive section's questions ask for a produced answer, and the choice questions vary the right position."""
    raw, questions = quiz_questions()
    assert raw["notebook"] == "07_by_hand"
    assert list(raw["sections"]) == ["predict", "retrieve", "concept_check", "derive"]
    parsed = quiz_schema.all_questions("07_by_hand")
    assert [q.id for q in parsed] == [q["id"] for _, q in questions] and len({q.id for q in parsed}) == len(parsed)
    assert all(q.produced for q in parsed if q.section == "derive")
    assert {q.level for q in parsed if q.section == "retrieve"} == {"factual", "conceptual", "synthetic"}
    assert len(raw["sections"]["concept_check"]["questions"]) >= 4
    assert 2 * sum(q.produced for q in parsed) >= len(parsed)
    positions = [next(i for i, c in enumerate(q.choices) if c.correct) for q in parsed if q.kind == "choice"]
    assert len(set(positions)) == len(positions), "the right choice sits at the same position twice"


def question(qid):
    return next(q for _, q in quiz_questions()[1] if q["id"] == qid)


def within(q, value):
    tol = q.get("tolerance", {"rel": 1e-6})
    return abs(value - q["answer"]) <= tol.get("abs", 0) + tol.get("rel", 0) * abs(q["answer"])


def test_quiz_numbers_are_computed():
    # first-loss-is-log-vocab: ln 23, and the notebook's first batch is that close
    q = question("first-loss-is-log-vocab")
    assert within(q, math.log(23))
    params = init_params(23, 2, 16, 64, seed=0, device="cpu")
    tokens = torch.randint(0, 23, (64, 2), generator=torch.Generator().manual_seed(0))
    assert within(q, forward(params, tokens, tokens.sum(1) % 23)[0].item())

    # bias-before-batchnorm and batchnorm-dx-column-sum: autograd's db1, and the columns of dx
    case = bh.model_case(9, 2, 3, 6, 8, seed=2, device="cpu")
    assert within(question("bias-before-batchnorm"), reference_grads(**case)["b1"].abs().max().item())
    dx = reference_batchnorm_backward(*bh.batchnorm_case(7, 4, seed=3, device="cpu").values())[0]
    assert within(question("batchnorm-dx-column-sum"), dx.sum(0).abs().max().item())

    # running-mean-update and unbiased-divisor-sequences: nn.BatchNorm1d itself
    norm = nn.BatchNorm1d(1)
    norm(torch.tensor([[4.0], [6.0]]))
    assert within(question("running-mean-update"), norm.running_mean.item())
    x = torch.randn(8, 16, 10, generator=torch.Generator().manual_seed(4))
    norm = nn.BatchNorm1d(16, momentum=1.0)
    norm(x)
    squares = ((x - x.mean((0, 2), keepdim=True)) ** 2).sum((0, 2))
    divisor = (squares / norm.running_var).mean().item()
    assert within(question("unbiased-divisor-sequences"), round(divisor)) and abs(divisor - round(divisor)) < 1e-3

    # mixed-variance-width: biased variances of batches of 4 average 3/4 of the population's
    q = question("mixed-variance-width")
    assert within(q, math.sqrt(4 / 3))
    batches = torch.randn(200_000, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert within({**q, "tolerance": {"rel": 0.01}}, (1 / batches.var(1, unbiased=False).mean()).sqrt().item())


def test_quiz_short_answers_and_snippets_are_computed():
    X = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    W = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    dY = torch.randn(5, 4, dtype=torch.float64)
    (X @ W).backward(dY)
    matmul = question("matmul-weight-gradient")
    for text in [matmul.get("value", ""), *matmul["accept"]]:
        if text and text.isascii() and "^" not in text:  # the maths spellings (Xᵀ dY) are accepted as typed
            torch.testing.assert_close(eval(text, {"X": X.detach(), "dY": dY, "torch": torch}), W.grad)

    snippet = question("index-plus-equals-repeats")
    scope = {"torch": torch}
    exec(snippet["code"], scope)
    assert scope["g"][1].item() in (10.0, 20.0)
    assert next(c for c in snippet["choices"] if c.get("correct"))["id"] == "one-of-the-writes"

    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(torch.randn(1, 3), None, None, training=True)
    x = torch.randn(1, 3, dtype=torch.float64)
    x_hat = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)
    assert torch.equal(x_hat, torch.zeros(1, 3, dtype=torch.float64))
    batch_of_one = question("batch-of-one-normalised")
    assert "0" in [batch_of_one.get("value"), *batch_of_one["accept"]]

    # training-diverges-at-step-one: the update slips show first at step 1
    for entry in ("tbh_ascends", "tbh_update_mid_backward"):
        with pytest.raises(GradingError, match="the loss of step 1 "):
            bh.check_train_by_hand("train_by_hand", getattr(catalogue, entry),
                                   [bh.training_case(7, 2, 3, 5, 6, 2, 4, 0.3, seed=1, device="cpu")])


# --- messages (issue 37): the input an answer raised on, NaN named, the dtype compared -------------------------
def test_an_answer_that_raises_is_shown_the_input_it_raised_on():
    def crashes(dout, x, gamma, eps=1e-5):
        return dout @ x  # (N, C) @ (N, C)

    with pytest.raises(GradingError) as err:
        bh.check_batchnorm_backward("batchnorm_backward", crashes, [bh.batchnorm_case(6, 4, seed=1, device="cpu")])
    first, rest = str(err.value).split("\n", 1)
    assert first.startswith("batchnorm_backward: raised RuntimeError")
    assert rest.startswith("  on input:\n    dout = tensor(shape=(6, 4)") and "eps = 1e-05" in rest
    with pytest.raises(GradingError) as err:  # an unimplemented answer needs no input
        bh.check_batchnorm_backward("batchnorm_backward", lambda *a: exec("raise NotImplementedError"),
                                    [bh.batchnorm_case(6, 4, seed=1, device="cpu")])
    assert "not implemented yet" in str(err.value) and "on input" not in str(err.value)


def test_a_nan_is_named_where_it_is_and_never_as_an_error_of_zero():
    """A batch of one through `dsq = dvar / (N - 1)`: 0 / 0 in every entry of dsq."""
    with pytest.raises(GradingError) as err:
        bh.check_batchnorm_steps("batchnorm_steps_backward", catalogue.st_dsq_unbiased,
                                 [bh.steps_case(1, 4, seed=81, device="cpu")])
    text = str(err.value)
    assert "dsq holds NaN or inf where autograd's is finite: in a batch of one, a division by N - 1" in text[:500]
    assert "NaN where the reference is a number: 4 elements, the first at index (0, 0)" in text
    assert "max abs error 0" not in text and "max rel error 0" not in text and "near eps" not in text
    one = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    with pytest.raises(GradingError) as err:
        checks.expect_close("ex", torch.tensor([1.0, float("nan"), 3.5], dtype=torch.float64), one)
    assert ("2 of 3 elements differ:\n    NaN where the reference is a number: 1 element, the first at index (1,)\n"
            "    1 finite element off: max abs error 0.5") in str(err.value)


def test_a_float32_answer_compared_in_float64_names_float32():
    with pytest.raises(GradingError) as err:
        bh.check_batchnorm_backward("batchnorm_backward", catalogue.bn_one_pass_variance,
                                    [bh.batchnorm_case(16, 5, seed=26, large_mean=True, device="cpu")],
                                    stress="float32-large-mean")
    assert "rtol=0 for torch.float32)" in str(err.value) and "torch.float64" not in str(err.value)


def test_the_steps_statement_says_eps_is_not_an_argument_and_the_visible_test_varies_it():
    """Issue 37: Karpathy's `(var + 1e-5) ** -1.5` passed the visible test and lost a hidden point with "dvar is
    wrong" and no hint. The statement says where eps comes from, and the visible test already names the slip."""
    import course

    nb = course.read(course.solution_path("07_by_hand"))
    statement = next(c.source for c in nb.cells if c.source.startswith("### Exercise: `batchnorm_steps_backward`"))
    assert "`eps` is not an argument" in statement and "other values of eps than the default `1e-5`" in statement
    cell = next(c.source for c in nb.cells if course.nbgrader_meta(c).get("grade_id") == "batchnorm_steps_backward")
    visible = cell.split("### BEGIN HIDDEN TESTS")[0]
    with pytest.raises(GradingError) as err:
        exec(visible, {"batchnorm_steps_backward": catalogue.st_typed_eps})
    assert "hint: your answer uses eps = 1e-5 where the layer's eps is 1e-3" in str(err.value)
    exec(visible, {"batchnorm_steps_backward": catalogue.st_keepdim})


def test_try_it_cells_print_the_numbers_they_expect_as_written():
    """Issue 37: `[0.20000000298023224, ...] (expected [0.2, 0.4])`. Each try-it cell of 07 that prints an
    expectation prints its own numbers as the expectation writes them (run on the reference solution)."""
    import ast
    import contextlib
    import io
    import re

    import course

    number = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
    cells = course.read(course.solution_path("07_by_hand")).cells
    checked = 0
    for k, cell in enumerate(cells):
        solution = cells[k - 1]  # a try-it cell follows its solution cell
        if cell.cell_type != "code" or "(expected" not in cell.source or not course.nbgrader_meta(solution).get(
                "solution"):
            continue
        names = {"torch": torch, "F": F, "nn": nn, "DEVICE": torch.device("cpu")}
        exec(solution.source, names)
        statements = ast.parse(cell.source).body
        upto = next(i for i, s in enumerate(statements) if "(expected" in ast.get_source_segment(cell.source, s))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(ast.Module(statements[:upto + 1], []), "try-it", "exec"), names)
        for line in out.getvalue().splitlines():
            if "(expected" in line:
                printed, expected = line.split("(expected", 1)
                assert number.findall(printed) and [float(v) for v in number.findall(printed)] == [
                    float(v) for v in number.findall(expected)], line
                checked += 1
    assert checked >= 2
