"""autograder.checks.toggles: correct answers pass, the classic slips fail with a message that names them."""
import collections
import math
from unittest import mock

import graphviz
import mutation
import pytest
import torch
import torch.nn.functional as F

from autograder.checks import GradingError, boundary
from autograder.checks import toggles as tc


# --- correct answers, written independently of the notebook's solutions ------------------------
def names_bfs(t):
    if t.grad_fn is None:
        return []
    out, seen, queue = [], {t.grad_fn}, collections.deque([t.grad_fn])
    while queue:
        node = queue.popleft()
        out.append(type(node).__name__)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return out


def freeze(model, trainable):
    named = dict(model.named_parameters())
    if set(trainable) - named.keys():
        raise ValueError("unknown names")
    for name, p in named.items():
        p.requires_grad_(name in set(trainable))
    return [p for p in model.parameters() if p.requires_grad]


def distill(s, t, T=2.0):
    p_t = F.softmax(t.detach() / T, dim=-1)
    return F.kl_div(F.log_softmax(s / T, dim=-1), p_t, reduction="batchmean") * T * T


def per_loss(losses, params):
    return [tuple(torch.autograd.grad(loss, params, retain_graph=True, materialize_grads=True)) for loss in losses]


def accumulate(model, loss_fn, x, y, k):
    model.zero_grad()
    for xc, yc in zip(torch.tensor_split(x, k), torch.tensor_split(y, k)):
        (loss_fn(model(xc), yc) * len(xc) / len(x)).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


def step(model, optimizer, loss_fn, x, y, max_norm=1.0):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def predict(model, x):
    with torch.inference_mode():
        return model(x)


# --- grad_fn_names -------------------------------------------------------------------------------
def test_reference_walk_is_breadth_first_and_visits_each_node_once():
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    w = torch.ones(3, dtype=torch.float64, requires_grad=True)
    h = x * w
    assert tc.reference_grad_fn_names((x * 2).sum()) == ["SumBackward0", "MulBackward0", "AccumulateGrad"]
    assert tc.reference_grad_fn_names(h.sum() + h.mean()) == [
        "AddBackward0", "SumBackward0", "MeanBackward0", "MulBackward0", "AccumulateGrad", "AccumulateGrad"]
    assert tc.reference_grad_fn_names(x) == [] and tc.reference_grad_fn_names(torch.ones(2) * 2) == []


def test_sample_graphs_are_deterministic_and_pass_a_correct_walk():
    graphs = tc.sample_graphs(seed=1)
    assert [w for w, _ in graphs] == [w for w, _ in tc.sample_graphs(seed=1)]
    tc.check_grad_fn_names("grad_fn_names", names_bfs, graphs)
    build_ladder = next(build for what, build in graphs if "60 steps" in what)
    assert len(tc.reference_grad_fn_names(build_ladder())) == 182
    again = dict(tc.sample_graphs(seed=1))  # a builder makes the same graph, with the same values, every time
    for what, build in graphs:
        assert tc.reference_grad_fn_names(build()) == tc.reference_grad_fn_names(again[what]())
        assert torch.equal(build().detach(), again[what]().detach())


def test_grad_fn_names_wants_builders_not_graphs():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match="function that builds it"):
        tc.check_grad_fn_names("grad_fn_names", names_bfs, [("(x * 2).sum()", (x * 2).sum())])


@pytest.mark.parametrize("wrong, hint", [
    (lambda t: names_bfs(t)[1:], "starts with the root"),
    (lambda t: [n for n in names_bfs(t) if n != "AccumulateGrad"], "AccumulateGrad"),
    (lambda t: list(dict.fromkeys(names_bfs(t))), "same class name"),
    (lambda t: [n.replace("AccumulateGrad", "torch::autograd::AccumulateGrad") for n in names_bfs(t)], "type(node)"),
    (lambda t: sorted(names_bfs(t)), "wrong order"),
])
def test_grad_fn_names_slips_are_named(wrong, hint):
    with pytest.raises(GradingError, match="hint") as caught:
        tc.check_grad_fn_names("grad_fn_names", wrong, tc.sample_graphs(seed=2))
    assert hint in str(caught.value)


# --- freeze_all_but ------------------------------------------------------------------------------
def test_freeze_checks_accept_a_correct_answer_and_leave_the_global_rng_alone():
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    tc.check_freeze_training("freeze_all_but", freeze, tc.deep_stack, ["2.weight", "2.bias"], seed=1)
    tc.check_freeze_flags("freeze_all_but", freeze, tc.lora_net, ("head.bias",), seed=2, frozen_before=("head.bias",))
    tc.check_freeze_unknown_name("freeze_all_but", freeze, tc.lora_net, seed=3)
    assert torch.equal(torch.rand(3), before)


def test_freeze_substring_match_is_caught_with_a_hint():
    def substring(model, trainable):
        for name, p in model.named_parameters():
            p.requires_grad_(any(t in name for t in trainable))
        return [p for p in model.parameters() if p.requires_grad]

    with pytest.raises(GradingError, match=r"12\.weight: requires_grad=True") as caught:
        tc.check_freeze_flags("freeze_all_but", substring, tc.deep_stack, ["2.weight"], seed=4)
    assert "whole names" in str(caught.value)


def test_freeze_training_needs_the_named_parameters_switched_back_on():
    def only_freezes(model, trainable):
        for name, p in model.named_parameters():
            if name not in trainable:
                p.requires_grad_(False)
        return [p for n, p in model.named_parameters() if n in trainable]

    tc.check_freeze_training("freeze_all_but", only_freezes, tc.lora_net, ["embed.weight"], seed=5)  # nothing was frozen
    with pytest.raises(GradingError, match="must train, even if it was frozen"):
        tc.check_freeze_training("freeze_all_but", only_freezes, tc.lora_net, ["embed.weight"], seed=5,
                                 frozen_before=("embed.weight",))


def test_freeze_unknown_name_must_raise_value_or_key_error():
    def asserts(model, trainable):
        assert set(trainable) <= dict(model.named_parameters()).keys()
        return freeze(model, trainable)

    with pytest.raises(GradingError, match="raised AssertionError"):
        tc.check_freeze_unknown_name("freeze_all_but", asserts, tc.lora_net, seed=6)
    with pytest.raises(GradingError, match="without a word"):
        tc.check_freeze_unknown_name("freeze_all_but", lambda m, t: [], tc.lora_net, seed=6)


# --- distill_loss --------------------------------------------------------------------------------
def test_reference_distill_loss_is_t_squared_batchmean_kl():
    s, t = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    T = 3.0
    p_t, log_p_s = torch.softmax(t / T, -1), torch.log_softmax(s / T, -1)
    by_hand = T ** 2 * (p_t * (p_t.log() - log_p_s)).sum(-1).mean()
    assert torch.allclose(tc.reference_distill_loss(s, t, T), by_hand)
    assert tc.reference_distill_loss(s, s, T).abs().item() < 1e-12
    assert math.isclose(tc.reference_distill_loss(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 2.0, 1.0]]), 1.0).item(),
                        1.1504, abs_tol=1e-4)  # the value the notebook states


def test_distill_checks_accept_a_correct_answer():
    tc.check_distill_value("distill_loss", distill, B=3, C=7, T=1.0, seed=1, dtype=torch.float32, scale=60.0)
    tc.check_distill_gradients("distill_loss", distill, B=4, C=5, T=2.0, seed=2)
    tc.check_distill_models("distill_loss", distill, seed=3)


def test_distill_checks_name_the_slips():
    with pytest.raises(GradingError, match="T\\*\\*2 factor is missing"):
        tc.check_distill_value("distill_loss", lambda s, t, T=2.0: distill(s, t, T) / T ** 2, B=4, C=5, T=2.0, seed=4)
    def undetached(s, t, T=2.0):
        return F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction="batchmean") * T * T

    with pytest.raises(GradingError, match="reached the teacher"):
        tc.check_distill_gradients("distill_loss", undetached, B=4, C=5, T=2.0, seed=5)
    with pytest.raises(GradingError, match=r"reached the teacher's parameters"):
        tc.check_distill_models("distill_loss", undetached, seed=7)
    with pytest.raises(GradingError, match="wrong side"):
        tc.check_distill_gradients("distill_loss", lambda s, t, T=2.0: distill(t, s.detach(), T) * 0 + distill(s.detach(), t, T),
                                   B=4, C=5, T=2.0, seed=6)


# --- per_loss_grads ------------------------------------------------------------------------------
def test_per_loss_check_accepts_autograd_grad_and_restores_nothing_it_did_not_touch():
    tc.check_per_loss_grads("per_loss_grads", per_loss, seed=1)
    tc.check_per_loss_grads("per_loss_grads", per_loss, seed=2, which=(1,), param_names=["head_a.bias"],
                            dtype=torch.float32)


def test_per_loss_check_catches_gradients_left_in_grad():
    def leaves_grad(losses, params):
        result = per_loss(losses, params)
        losses[-1].backward()
        return result

    with pytest.raises(GradingError, match=r"\.grad (changed|was None)"):
        tc.check_per_loss_grads("per_loss_grads", leaves_grad, seed=3)


# --- accumulated_grads ---------------------------------------------------------------------------
def test_accumulation_check_accepts_uneven_chunks_and_measures_memory():
    tc.check_accumulated_grads("accumulated_grads", accumulate, n=10, k=3, seed=1)
    tc.check_accumulated_grads("accumulated_grads", accumulate, n=10, k=4, seed=2, dtype=torch.float32, task="xent",
                               frozen=("0.bias",))
    tc.check_accumulated_grads("accumulated_grads", accumulate, n=96, k=4, seed=3, hidden=64, memory=True)


def test_accumulation_check_names_the_equal_weights_slip_and_the_single_backward():
    def equal_weights(model, loss_fn, x, y, k):
        model.zero_grad()
        for xc, yc in zip(torch.tensor_split(x, k), torch.tensor_split(y, k)):
            (loss_fn(model(xc), yc) / k).backward()
        return tuple(p.grad.clone() for p in model.parameters())

    def one_backward(model, loss_fn, x, y, k):
        model.zero_grad()
        sum(loss_fn(model(xc), yc) * len(xc) / len(x)
            for xc, yc in zip(torch.tensor_split(x, k), torch.tensor_split(y, k))).backward()
        return tuple(p.grad.clone() for p in model.parameters())

    with pytest.raises(GradingError, match="len\\(chunk\\) / len\\(x\\) instead"):
        tc.check_accumulated_grads("accumulated_grads", equal_weights, n=10, k=3, seed=4)
    with pytest.raises(GradingError, match="several chunks were alive"):
        tc.check_accumulated_grads("accumulated_grads", one_backward, n=96, k=4, seed=5, hidden=64, memory=True)


# --- train_step ----------------------------------------------------------------------------------
def test_train_step_checks_accept_the_reference_order():
    tc.check_train_step("train_step", step, seed=1, max_norm=0.5)
    tc.check_train_step("train_step", step, seed=2, optimizer="adamw", dtype=torch.float32)
    tc.check_train_step_keeps_no_graph("train_step", step, seed=3, steps=20)


def test_clipping_matters_in_the_training_setup():
    model, opt, loss_fn, batch = tc.training_setup(4)
    x, y = batch(0)
    loss_fn(model(x), y).backward()
    assert torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")) > 5


def test_train_step_check_diagnoses_clipping_after_the_step():
    def clip_late(model, optimizer, loss_fn, x, y, max_norm=1.0):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return loss.item()

    with pytest.raises(GradingError, match="unclipped gradients"):
        tc.check_train_step("train_step", clip_late, seed=5, max_norm=0.5)


def test_no_graph_check_sees_retained_graphs_and_kept_losses():
    kept = []

    def retains(model, optimizer, loss_fn, x, y, max_norm=1.0):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward(retain_graph=True)
        optimizer.step()
        kept.append(loss)
        return loss.item()

    def stores(model, optimizer, loss_fn, x, y, max_norm=1.0):
        result = step(model, optimizer, loss_fn, x, y, max_norm)
        kept.append(model(x))  # an output kept after the step: its graph was never freed
        return result

    with pytest.raises(GradingError, match="still held"):
        tc.check_train_step_keeps_no_graph("train_step", retains, seed=6, steps=5)
    kept.clear()
    with pytest.raises(GradingError, match="still held"):
        tc.check_train_step_keeps_no_graph("train_step", stores, seed=7, steps=5)
    kept.clear()

    def keeps_outputs(model, optimizer, loss_fn, x, y, max_norm=1.0):
        optimizer.zero_grad()
        prediction = model(x)
        loss = loss_fn(prediction, y)
        loss.backward()  # frees the saved tensors: only weak references see what is kept
        optimizer.step()
        kept.append(prediction)
        return loss.item()

    with pytest.raises(GradingError, match="5 of the 5 model outputs"):
        tc.check_train_step_keeps_no_graph("train_step", keeps_outputs, seed=8, steps=5)
    kept.clear()


# --- predict -------------------------------------------------------------------------------------
def test_predict_check_accepts_inference_mode_and_repairs_grad_mode():
    tc.check_predict("predict", predict, seed=1, model_kind="two_heads")

    def switches_off(model, x):
        torch.set_grad_enabled(False)
        with torch.inference_mode():
            return model(x)

    with pytest.raises(GradingError, match="switched off"):
        tc.check_predict("predict", switches_off, seed=2)
    assert torch.is_grad_enabled()


# --- drawing -------------------------------------------------------------------------------------
def test_drawing_shows_nodes_saved_tensors_and_named_leaves():
    x = torch.randn(4, 3)
    W = torch.randn(2, 3, requires_grad=True)
    h = torch.tanh(x @ W.T)
    L = (h * h).mean()
    dot = tc.draw_autograd_graph(L, names={"W": W})
    assert isinstance(dot, graphviz.Digraph)
    assert "TanhBackward0\\nsaved result: 4x2" in dot.source and "W 2x3" in dot.source
    assert tc.saved_tensors_of(h.grad_fn)["result"].shape == (4, 2)
    L.backward()
    assert tc.saved_tensors_of(h.grad_fn) == {"result": "freed"}
    assert "freed" in tc.draw_autograd_graph(L).source
    assert "nothing recorded" in tc.draw_autograd_graph(W).source


# --- trusted grading: the learner's code runs in a driver (in the kernel), the comparisons here ------
class KernelWithoutComparisons(mutation.Loopback):
    """A kernel where the submission has disabled the comparisons it can reach."""

    def ask(self, request, response):
        with mock.patch.object(torch, "allclose", lambda *a, **k: True), \
                mock.patch.object(torch, "equal", lambda *a, **k: True), \
                mock.patch.object(tc, "expect_close", lambda *a, **k: None):
            super().ask(request, response)


def run_trusted(source, implementation, kernel=mutation.Loopback):
    """Run a test cell as trusted grading does: the learner's name `g` is a stand-in, reached only
    through `kernel` (data-only answers, a random generator of its own). Returns the cell's error (None
    if it passed) and every answer that came back."""
    answers = []

    class Recording(kernel):
        def call(self, exercise, fn, args, options):
            answer = super().call(exercise, fn, args, options)
            answers.append(answer)
            return answer

    with mock.patch.object(mutation, "Loopback", Recording):
        err = mutation._run_cell(source, "test", {"__name__": "__main__", "g": implementation}, True)
    return err, answers


CELLS = {
    "grad_fn_names": """
import torch
from autograder.checks import toggles as tc
leaf = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
tc.check_grad_fn_names("g", g, [("(x * 2).sum()", lambda: (leaf * 2).sum())])
tc.check_grad_fn_names("g", g, tc.sample_graphs(seed=9))
""",
    "freeze_all_but": """
from autograder.checks import toggles as tc
tc.check_freeze_flags("g", g, tc.deep_stack, ["2.weight", "2.bias"], seed=1, frozen_before=("2.bias",))
tc.check_freeze_training("g", g, tc.lora_net, ["block.lora_A", "head.bias"], seed=2)
tc.check_freeze_unknown_name("g", g, tc.lora_net, seed=3)
""",
    "distill_loss": """
from autograder.checks import toggles as tc
tc.check_distill_gradients("g", g, B=4, C=5, T=2.0, seed=1)
tc.check_distill_models("g", g, seed=2)
""",
    "per_loss_grads": """
from autograder.checks import toggles as tc
tc.check_per_loss_grads("g", g, seed=1)
""",
    "accumulated_grads": """
from autograder.checks import toggles as tc
tc.check_accumulated_grads("g", g, n=10, k=3, seed=1, frozen=("0.bias",))
tc.check_accumulated_grads("g", g, n=96, k=4, seed=2, hidden=64, memory=True)
""",
    "train_step": """
from autograder.checks import toggles as tc
tc.check_train_step("g", g, seed=1, max_norm=0.5)
tc.check_train_step_keeps_no_graph("g", g, seed=2, steps=5)
""",
    "predict": """
from autograder.checks import toggles as tc
tc.check_predict("g", g, seed=1)
tc.check_predict("g", g, seed=2, model_kind="two_heads")
""",
}


class UnknownName(ValueError):
    pass


def freeze_own_error(model, trainable):
    if set(trainable) - dict(model.named_parameters()).keys():
        raise UnknownName("not in the model")
    return freeze(model, trainable)


def freeze_asserts(model, trainable):
    assert set(trainable) <= dict(model.named_parameters()).keys()
    return freeze(model, trainable)


def freeze_on_data(model, trainable):
    for name, p in model.named_parameters():
        p.data.requires_grad = name in trainable
    return [p for n, p in model.named_parameters() if n in trainable]


def distill_undetached(s, t, T=2.0):
    return F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction="batchmean") * T * T


def per_loss_leaves_grad(losses, params):
    result = per_loss(losses, params)
    losses[-1].backward()
    return result


def accumulate_on_stale(model, loss_fn, x, y, k):
    for xc, yc in zip(torch.tensor_split(x, k), torch.tensor_split(y, k)):
        (loss_fn(model(xc), yc) * len(xc) / len(x)).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


def accumulate_one_backward(model, loss_fn, x, y, k):
    model.zero_grad()
    sum(loss_fn(model(xc), yc) * len(xc) / len(x)
        for xc, yc in zip(torch.tensor_split(x, k), torch.tensor_split(y, k))).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


def step_on_stale(model, optimizer, loss_fn, x, y, max_norm=1.0):
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def step_retains(model, optimizer, loss_fn, x, y, max_norm=1.0, _kept=[]):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward(retain_graph=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    _kept.append(loss)
    return loss.item()


def step_keeps_losses(model, optimizer, loss_fn, x, y, max_norm=1.0, _kept=[]):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    _kept.append(loss)
    return loss.item()


def predict_switches_off(model, x):
    torch.set_grad_enabled(False)
    with torch.inference_mode():
        return model(x)


def predict_no_grad(model, x):
    with torch.no_grad():
        return model(x)


RIGHT = [("grad_fn_names", names_bfs), ("freeze_all_but", freeze), ("freeze_all_but", freeze_own_error),
         ("distill_loss", distill), ("per_loss_grads", per_loss), ("accumulated_grads", accumulate),
         ("train_step", step), ("predict", predict)]
WRONG = [
    ("grad_fn_names", lambda t: names_bfs(t)[1:], "the list starts with the root itself"),
    ("grad_fn_names", lambda t: [n for n in names_bfs(t) if n != "AccumulateGrad"], "AccumulateGrad nodes"),
    ("freeze_all_but", freeze_asserts, "raised AssertionError"),
    ("freeze_all_but", freeze_on_data, "wrong requires_grad flags"),
    ("distill_loss", distill_undetached, "a gradient reached the teacher logits"),
    ("per_loss_grads", per_loss_leaves_grad, "trunk.weight.grad changed during the call"),
    ("accumulated_grads", accumulate_on_stale, "the gradients that were in .grad before the call were added in"),
    ("accumulated_grads", accumulate_one_backward, "the graphs of several chunks were alive at the same time"),
    ("train_step", step_on_stale, "the gradients left in .grad before the call were added in"),
    ("train_step", step_retains, "after call 1, tensors saved for backward are still held"),
    ("train_step", step_keeps_losses, "5 of the 5 loss tensors made during the calls are still alive"),
    ("predict", predict_switches_off, "left gradient tracking switched off"),
    ("predict", predict_no_grad, "is not an inference tensor"),
]


def _leaves(answer):
    if isinstance(answer, (tuple, list)):
        return [leaf for item in answer for leaf in _leaves(item)]
    if isinstance(answer, dict):
        return [leaf for item in answer.values() for leaf in _leaves(item)]
    if isinstance(answer, (tc.Backward, tc.Call, tc.GraphWatch, tc.Caught)):
        return [answer, *_leaves([getattr(answer, f.name) for f in tc.dataclasses.fields(answer)])]
    return [answer]


@pytest.mark.parametrize("kernel", [mutation.Loopback, KernelWithoutComparisons], ids=["kernel", "patched-kernel"])
@pytest.mark.parametrize("cell, implementation", RIGHT, ids=lambda v: getattr(v, "__name__", v))
def test_trusted_grading_passes_a_right_answer_and_only_data_comes_back(cell, implementation, kernel):
    err, answers = run_trusted(CELLS[cell], implementation, kernel)
    assert err is None, err
    assert answers
    leaves = [leaf for answer in answers for leaf in _leaves(answer)]
    assert not [leaf for leaf in leaves if isinstance(leaf, (boundary.Opaque, boundary.Raised))]


@pytest.mark.parametrize("kernel", [mutation.Loopback, KernelWithoutComparisons], ids=["kernel", "patched-kernel"])
@pytest.mark.parametrize("cell, implementation, words", WRONG, ids=lambda v: getattr(v, "__name__", None))
def test_trusted_grading_rejects_a_wrong_answer_even_when_the_kernel_disables_the_comparisons(
        cell, implementation, words, kernel):
    err, _ = run_trusted(CELLS[cell], implementation, kernel)
    assert isinstance(err, GradingError) and words in str(err), err
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("cell, implementation, words", WRONG, ids=lambda v: getattr(v, "__name__", None))
def test_trusted_grading_gives_the_plain_message(cell, implementation, words):
    namespace = {"__name__": "__main__", "g": implementation}
    with pytest.raises(GradingError) as plain:
        mutation._run_cell(CELLS[cell], "test", namespace, False)
    err, _ = run_trusted(CELLS[cell], implementation)
    assert str(err) == str(plain.value)


def test_trusted_kernel_sees_stale_grads_and_its_own_saved_tensors():
    """What the grader sets up that a pickle does not carry (.grad) or cannot see (the kernel's saved
    tensors, its grad mode) is set up and observed by the drivers, in the kernel."""
    model, loss_fn, x, y = tc._regression(1, torch.float64, "cpu", 10)
    stale = [torch.ones_like(p) for p in model.parameters()]
    seen = tc.accumulate_run(lambda m, *a: [p.grad.clone() for p in m.parameters()], stale, True,
                             model, loss_fn, x, y, 3)
    assert all(torch.equal(g, s) for g, s in zip(seen.returned, stale)) and seen.peak_saved_bytes == 0
    one = tc.accumulate_run(accumulate_one_backward, stale, True, model, loss_fn, x, y, 3)
    assert one.peak_saved_bytes > 0
    watch = tc.no_graph_run(step_keeps_losses, seed=3, steps=4, dtype=torch.float64)
    assert len(watch.returned) == 4 and watch.live_bytes == [0] * 4
    assert watch.loss_calls == 4 and watch.losses_alive >= 4
    got, is_on = tc.predict_run(predict_switches_off, model, x)
    assert got.is_inference() and not is_on and torch.is_grad_enabled()
    with torch.no_grad():  # the notebook's own cells switched it off: the call still starts with it on
        assert tc.predict_run(lambda m, inp: torch.is_grad_enabled(), model, x) == (True, True)
        assert not torch.is_grad_enabled()  # and the kernel is left as it was
