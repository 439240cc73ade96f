"""autograder.checks.nb04_toggles: correct answers pass, the classic slips fail with a message that names them.

Hidden tests pass the course's answer key (solutions/04_toggles/answer_key.py) into the checks whose only
reference is an answer; the visible tests' literal cases are checked here against that key too."""
import collections
import dataclasses
import math
from unittest import mock

import mutation
import pytest
import torch
import torch.nn.functional as F

from autograder.checks import GradingError, boundary
from autograder.checks.nb04_toggles import (
    accumulation,
    cases,
    distillation,
    freezing,
    graph_walk,
    models,
    per_loss,
    prediction,
    training_step,
)
from autograder.grader.keys import answer_key

KEY = answer_key("04_toggles")


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


def per_loss_ok(losses, params):
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


# what the visible tests of the notebook state (each checked against the answer key below)
EXAMPLE_PER_LOSS = [([3.0, 3.0], [3.0]), ([18.0, 36.0], [30.0]), ([2.0, 4.0], [0.0])]
EXAMPLE_STEP = dict(max_norm=0.5, loss=12.3125, weight=[[0.469259180084936, -0.9606133244838243]],
                    bias=[0.2480786987553085])


# --- grad_fn_names -------------------------------------------------------------------------------
def test_the_key_walks_breadth_first_and_visits_each_node_once():
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    w = torch.ones(3, dtype=torch.float64, requires_grad=True)
    h = x * w
    assert KEY.grad_fn_names((x * 2).sum()) == ["SumBackward0", "MulBackward0", "AccumulateGrad"]
    assert KEY.grad_fn_names(h.sum() + h.mean()) == [
        "AddBackward0", "SumBackward0", "MeanBackward0", "MulBackward0", "AccumulateGrad", "AccumulateGrad"]
    assert KEY.grad_fn_names(x) == [] and KEY.grad_fn_names(torch.ones(2) * 2) == []


def test_autograd_graphs_are_deterministic_and_pass_a_correct_walk():
    graphs = graph_walk.autograd_graphs(seed=1)
    assert [w for w, _ in graphs] == [w for w, _ in graph_walk.autograd_graphs(seed=1)]
    graph_walk.check_grad_fn_names("grad_fn_names", names_bfs, graphs, KEY.grad_fn_names)
    build_ladder = next(build for what, build in graphs if "60 steps" in what)
    assert len(KEY.grad_fn_names(build_ladder())) == 182
    again = dict(graph_walk.autograd_graphs(seed=1))  # a builder makes the same graph, with the same values, every time
    for what, build in graphs:
        assert KEY.grad_fn_names(build()) == KEY.grad_fn_names(again[what]())
        assert torch.equal(build().detach(), again[what]().detach())


def test_the_deep_graph_is_deeper_than_pythons_stack_and_a_recursive_walk_is_told_so():
    """The notebook says the tests walk a graph thousands of nodes deep; a walk that recurses per level fails."""
    import sys

    def recursive(t):
        def walk(level, seen):
            following = []
            for node in level:
                for child, _ in node.next_functions:
                    if child is not None and child not in seen:
                        seen.add(child)
                        following.append(child)
            return [type(node).__name__ for node in level] + (walk(following, seen) if following else [])
        return walk([t.grad_fn], {t.grad_fn}) if t.grad_fn is not None else []

    graphs = graph_walk.autograd_graphs(seed=1)
    build_deep = next(build for what, build in graphs if "nodes deep" in what)
    assert len(KEY.grad_fn_names(build_deep())) == graph_walk.DEEP + 2 >= 2000
    assert graph_walk.DEEP > sys.getrecursionlimit()
    shallow = [g for g in graphs if "nodes deep" not in g[0]]
    graph_walk.check_grad_fn_names("grad_fn_names", recursive, shallow, KEY.grad_fn_names)  # right where it runs
    with pytest.raises(GradingError, match="RecursionError") as caught:
        graph_walk.check_grad_fn_names("grad_fn_names", recursive, graphs, KEY.grad_fn_names)
    assert "a loop and a queue of your own" in str(caught.value)


def test_grad_fn_names_wants_builders_and_expected_names():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match="function that builds it"):
        graph_walk.check_grad_fn_names("grad_fn_names", names_bfs, [("(x * 2).sum()", (x * 2).sum())],
                                       KEY.grad_fn_names)
    with pytest.raises(TypeError, match="no expected names"):
        graph_walk.check_grad_fn_names("grad_fn_names", names_bfs, [("(x * 2).sum()", lambda: (x * 2).sum())])


def test_stated_names_are_checked_like_the_reference():
    x = torch.ones(3, requires_grad=True)
    stated = [("(x * 2).sum()", lambda: (x * 2).sum(), ["SumBackward0", "MulBackward0", "AccumulateGrad"])]
    graph_walk.check_grad_fn_names("grad_fn_names", names_bfs, stated)
    with pytest.raises(GradingError, match="AccumulateGrad nodes"):
        graph_walk.check_grad_fn_names("grad_fn_names", lambda t: names_bfs(t)[:-1], stated)


@pytest.mark.parametrize("wrong, hint", [
    (lambda t: names_bfs(t)[1:], "starts with the root"),
    (lambda t: [n for n in names_bfs(t) if n != "AccumulateGrad"], "AccumulateGrad"),
    (lambda t: list(dict.fromkeys(names_bfs(t))), "same class name"),
    (lambda t: [n.replace("AccumulateGrad", "torch::autograd::AccumulateGrad") for n in names_bfs(t)], "type(node)"),
    (lambda t: sorted(names_bfs(t)), "wrong order"),
])
def test_grad_fn_names_slips_are_named(wrong, hint):
    with pytest.raises(GradingError, match="hint") as caught:
        graph_walk.check_grad_fn_names("grad_fn_names", wrong, graph_walk.autograd_graphs(seed=2), KEY.grad_fn_names)
    assert hint in str(caught.value)


def test_an_answer_that_calls_the_key_is_refused():
    with pytest.raises(GradingError, match="called the course's answer key"):
        graph_walk.check_grad_fn_names("grad_fn_names", KEY.grad_fn_names, graph_walk.autograd_graphs(seed=3),
                                       KEY.grad_fn_names)


# --- freeze_all_but ------------------------------------------------------------------------------
def test_freeze_checks_accept_a_correct_answer_and_leave_the_global_rng_alone():
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    freezing.check_freeze_training("freeze_all_but", freeze, models.deep_stack, ["2.weight", "2.bias"], seed=1)
    freezing.check_freeze_flags("freeze_all_but", freeze, models.lora_net, ("head.bias",), seed=2,
                                frozen_before=("head.bias",))
    freezing.check_freeze_unknown_name("freeze_all_but", freeze, models.lora_net, seed=3)
    assert torch.equal(torch.rand(3), before)


def test_freeze_substring_match_is_caught_with_a_hint():
    def substring(model, trainable):
        for name, p in model.named_parameters():
            p.requires_grad_(any(t in name for t in trainable))
        return [p for p in model.parameters() if p.requires_grad]

    with pytest.raises(GradingError, match=r"12\.weight: requires_grad=True") as caught:
        freezing.check_freeze_flags("freeze_all_but", substring, models.deep_stack, ["2.weight"], seed=4)
    assert "whole names" in str(caught.value)


def test_freeze_training_needs_the_named_parameters_switched_back_on():
    def only_freezes(model, trainable):
        for name, p in model.named_parameters():
            if name not in trainable:
                p.requires_grad_(False)
        return [p for n, p in model.named_parameters() if n in trainable]

    freezing.check_freeze_training("freeze_all_but", only_freezes, models.lora_net, ["embed.weight"], seed=5)
    with pytest.raises(GradingError, match="must train, even if it was frozen"):
        freezing.check_freeze_training("freeze_all_but", only_freezes, models.lora_net, ["embed.weight"], seed=5,
                                       frozen_before=("embed.weight",))


def test_freeze_unknown_name_must_raise_value_or_key_error():
    def asserts(model, trainable):
        assert set(trainable) <= dict(model.named_parameters()).keys()
        return freeze(model, trainable)

    with pytest.raises(GradingError, match="raised AssertionError"):
        freezing.check_freeze_unknown_name("freeze_all_but", asserts, models.lora_net, seed=6)
    with pytest.raises(GradingError, match="without a word"):
        freezing.check_freeze_unknown_name("freeze_all_but", lambda m, t: [], models.lora_net, seed=6)


# --- distill_loss --------------------------------------------------------------------------------
def test_the_key_is_t_squared_batchmean_kl_and_gives_the_values_the_notebook_states():
    s, t = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    T = 3.0
    p_t, log_p_s = torch.softmax(t / T, -1), torch.log_softmax(s / T, -1)
    by_hand = T ** 2 * (p_t * (p_t.log() - log_p_s)).sum(-1).mean()
    assert torch.allclose(KEY.distill_loss(s, t, T), by_hand)
    assert KEY.distill_loss(s, s, T).abs().item() < 1e-12
    stated = {1.0: ([[1.0, 2.0, 3.0]], [[3.0, 2.0, 1.0]], 1.1504207652),  # the exercise's example
              2.0: ([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], [[3.0, 2.0, 1.0], [1.0, 0.0, -1.0]], 0.7971552395)}
    for T, (s_, t_, value) in stated.items():
        got = KEY.distill_loss(torch.tensor(s_, dtype=torch.float64), torch.tensor(t_, dtype=torch.float64), T).item()
        assert math.isclose(got, value, rel_tol=1e-9)


def test_the_closed_form_gradient_is_autograds():
    s = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    t = torch.randn(6, 4, dtype=torch.float64)
    (grad,) = torch.autograd.grad(KEY.distill_loss(s, t, 3.0), s)
    assert torch.allclose(distillation._student_gradient(s, t, 3.0), grad, rtol=1e-12, atol=1e-14)


def test_distill_checks_accept_a_correct_answer():
    distillation.check_distill_value("distill_loss", distill, KEY.distill_loss, B=3, C=7, T=1.0, seed=1,
                                     dtype=torch.float32, scale=60.0)
    distillation.check_distill_example("distill_loss", distill, [[1.0, 2.0, 3.0]], [[3.0, 2.0, 1.0]], 1.0, 1.1504207652)
    distillation.check_distill_gradients("distill_loss", distill, B=4, C=5, T=2.0, seed=2)
    distillation.check_distill_gradients("distill_loss", distill, B=6, C=3, T=3.0, seed=3, dtype=torch.float32)
    distillation.check_distill_models("distill_loss", distill, seed=3)


def log_of_softmax(s, t, T=2.0):
    p_t = F.softmax(t.detach() / T, dim=-1)
    return F.kl_div(torch.log(F.softmax(s / T, dim=-1)), p_t, reduction="batchmean") * T * T


def test_large_logits_break_log_of_softmax_and_not_log_softmax():
    """The battery's large logits make log(softmax(.)) -inf; the float64 reference and log_softmax stay
    finite, and the failure names the stress."""
    dtype = torch.float32
    s, t = distillation._logits(5, 7, 437, dtype, "cpu", "large")
    assert s.abs().max() > 100 and torch.isfinite(KEY.distill_loss(s, t, 1.0))
    assert not torch.isfinite(log_of_softmax(s, t, 1.0))
    distillation.check_distill_value("distill_loss", distill, KEY.distill_loss, B=5, C=7, T=1.0, seed=437,
                                     dtype=dtype, scale="large")
    with pytest.raises(GradingError, match="fails for float32 logits as large as a few hundred") as caught:
        distillation.check_distill_value("distill_loss", log_of_softmax, KEY.distill_loss, B=5, C=7, T=1.0, seed=437,
                                         dtype=dtype, scale="large")
    assert "log_softmax" in str(caught.value)


def test_large_logit_gradients_and_a_batch_of_one_are_named():
    distillation.check_distill_gradients("distill_loss", distill, B=5, C=7, T=1.0, seed=445, dtype=torch.float32,
                                         scale="large")
    with pytest.raises(GradingError, match="fails for float32 logits as large as a few hundred"):
        distillation.check_distill_gradients("distill_loss", log_of_softmax, B=5, C=7, T=1.0, seed=445,
                                             dtype=torch.float32, scale="large")
    def wrong_for_one(s, t, T=2.0):
        return distill(s, t, T) * (2 if len(s) == 1 else 1)

    distillation.check_distill_value("distill_loss", wrong_for_one, KEY.distill_loss, B=4, C=5, T=2.0, seed=430)
    with pytest.raises(GradingError, match="fails for a batch of one"):
        distillation.check_distill_value("distill_loss", wrong_for_one, KEY.distill_loss, B=1, C=2, T=1.0, seed=431)


def test_distill_checks_name_the_slips():
    with pytest.raises(GradingError, match="T\\*\\*2 factor is missing"):
        distillation.check_distill_value("distill_loss", lambda s, t, T=2.0: distill(s, t, T) / T ** 2,
                                         KEY.distill_loss, B=4, C=5, T=2.0, seed=4)
    with pytest.raises(GradingError, match="T\\*\\*2 factor is missing"):
        distillation.check_distill_example("distill_loss", lambda s, t, T=2.0: distill(s, t, T) / T ** 2,
                                           [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], [[3.0, 2.0, 1.0], [1.0, 0.0, -1.0]],
                                           2.0, 0.7971552395)

    def undetached(s, t, T=2.0):
        return F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction="batchmean") * T * T

    with pytest.raises(GradingError, match="reached the teacher"):
        distillation.check_distill_gradients("distill_loss", undetached, B=4, C=5, T=2.0, seed=5)
    with pytest.raises(GradingError, match=r"reached the teacher's parameters"):
        distillation.check_distill_models("distill_loss", undetached, seed=7)
    with pytest.raises(GradingError, match="wrong side"):
        distillation.check_distill_gradients(
            "distill_loss", lambda s, t, T=2.0: distill(t, s.detach(), T) * 0 + distill(s.detach(), t, T),
            B=4, C=5, T=2.0, seed=6)
    with pytest.raises(GradingError, match="wrong values in student_logits.grad"):  # the gradient of a wrong loss
        distillation.check_distill_gradients("distill_loss", lambda s, t, T=2.0: distill(s, t, T) / T, B=4, C=5,
                                             T=2.0, seed=8)


# --- per_loss_grads ------------------------------------------------------------------------------
def test_per_loss_check_accepts_autograd_grad_and_restores_nothing_it_did_not_touch():
    per_loss.check_per_loss_grads("per_loss_grads", per_loss_ok, KEY.per_loss_grads, seed=1)
    per_loss.check_per_loss_grads("per_loss_grads", per_loss_ok, KEY.per_loss_grads, seed=2, which=(1,),
                                  param_names=["head_a.bias"], dtype=torch.float32)


def test_the_stated_example_is_what_the_key_gives():
    losses, params, _ = per_loss.shared_product_setup()
    got = KEY.per_loss_grads(losses, params)
    assert [tuple(g.tolist() for g in loss) for loss in got] == [([3.0, 3.0], [3.0]), ([18.0, 36.0], [30.0]),
                                                                 ([2.0, 4.0], [0.0])]
    per_loss.check_per_loss_example("per_loss_grads", per_loss_ok, EXAMPLE_PER_LOSS)


def test_per_loss_check_catches_gradients_left_in_grad():
    def leaves_grad(losses, params):
        result = per_loss_ok(losses, params)
        losses[-1].backward()
        return result

    with pytest.raises(GradingError, match=r"\.grad (changed|was None)"):
        per_loss.check_per_loss_grads("per_loss_grads", leaves_grad, KEY.per_loss_grads, seed=3)
    with pytest.raises(GradingError, match=r"w\.grad was None before the call"):
        per_loss.check_per_loss_example("per_loss_grads", leaves_grad, EXAMPLE_PER_LOSS)


def test_per_loss_check_watches_the_models_other_parameters_and_losses_that_reach_no_param():
    def backward_restoring(losses, params, inputs=None):
        saved = [p.grad for p in params]
        result = []
        for loss in losses:
            for p in params:
                p.grad = None
            loss.backward(retain_graph=True, inputs=inputs and list(params))
            result.append(tuple(torch.zeros_like(p) if p.grad is None else p.grad for p in params))
        for p, g in zip(params, saved):
            p.grad = g
        return result

    with_inputs = lambda losses, params: backward_restoring(losses, params, inputs=True)  # noqa: E731
    for fn in (per_loss_ok, with_inputs):  # a loss that reaches none of the params; losses that share none
        per_loss.check_per_loss_grads("per_loss_grads", fn, KEY.per_loss_grads, seed=4, which=(0,),
                                      param_names=["head_b.weight", "head_b.bias"])
        per_loss.check_per_loss_grads("per_loss_grads", fn, KEY.per_loss_grads, seed=5, which=(0, 1),
                                      param_names=["head_a.weight", "head_b.weight"])
    with pytest.raises(GradingError, match=r"trunk\.weight\.grad \(a parameter of the model, not in params\)"):
        per_loss.check_per_loss_grads("per_loss_grads", backward_restoring, KEY.per_loss_grads, seed=6, which=(0, 1),
                                      param_names=["head_a.weight", "head_b.weight"])


def test_per_loss_example_names_the_leak_of_one_loss_into_the_next():
    def accumulates(losses, params):
        for p in params:
            p.grad = None
        result = []
        for loss in losses:
            loss.backward(retain_graph=True)
            result.append(tuple(p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params))
        return result

    with pytest.raises(GradingError, match="earlier losses' gradients were added in"):
        per_loss.check_per_loss_example("per_loss_grads", accumulates, EXAMPLE_PER_LOSS)


# --- accumulated_grads ---------------------------------------------------------------------------
def test_accumulation_check_accepts_uneven_chunks_and_measures_memory():
    accumulation.check_accumulated_grads("accumulated_grads", accumulate, n=10, k=3, seed=1)
    accumulation.check_accumulated_grads("accumulated_grads", accumulate, n=10, k=4, seed=2, dtype=torch.float32,
                                         task="xent", frozen=("0.bias",))
    accumulation.check_accumulated_grads("accumulated_grads", accumulate, n=96, k=4, seed=3, hidden=64, memory=True)


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
        accumulation.check_accumulated_grads("accumulated_grads", equal_weights, n=10, k=3, seed=4)
    with pytest.raises(GradingError, match="several chunks were alive"):
        accumulation.check_accumulated_grads("accumulated_grads", one_backward, n=96, k=4, seed=5, hidden=64,
                                             memory=True)


def test_accumulation_check_wants_copies_not_the_grad_buffers():
    def no_copies(model, loss_fn, x, y, k):
        accumulate(model, loss_fn, x, y, k)
        return tuple(p.grad.detach() for p in model.parameters() if p.requires_grad)  # shares .grad's memory

    with pytest.raises(GradingError, match=r"returned 0\.weight\.grad itself, not a copy"):
        accumulation.check_accumulated_grads("accumulated_grads", no_copies, n=10, k=3, seed=1)
    err, _ = run_trusted(CELLS["accumulated_grads"], no_copies)  # the answer crosses as a copy; the driver looked
    assert isinstance(err, GradingError) and "not a copy" in str(err), err


# --- train_step ----------------------------------------------------------------------------------
def test_train_step_checks_accept_the_reference_order():
    training_step.check_train_step("train_step", step, KEY.train_step, seed=1, max_norm=0.5)
    training_step.check_train_step("train_step", step, KEY.train_step, seed=1, max_norm=0.5, batch_size=1)
    training_step.check_train_step("train_step", step, KEY.train_step, seed=2, optimizer="adamw", dtype=torch.float32)
    training_step.check_train_step_example("train_step", step, **EXAMPLE_STEP)
    training_step.check_train_step_keeps_no_graph("train_step", step, seed=3, steps=20)


def test_the_stated_step_is_what_the_key_gives():
    model, opt, loss_fn, x, y = training_step.tiny_regression()
    assert KEY.train_step(model, opt, loss_fn, x, y, EXAMPLE_STEP["max_norm"]) == EXAMPLE_STEP["loss"]
    assert torch.allclose(model.weight, torch.tensor(EXAMPLE_STEP["weight"], dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(model.bias, torch.tensor(EXAMPLE_STEP["bias"], dtype=torch.float64), rtol=1e-12)


def test_clipping_matters_in_the_training_setup():
    model, opt, loss_fn, batch = training_step.training_setup(4)
    x, y = batch(0)
    loss_fn(model(x), y).backward()
    assert torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")) > 5
    model, opt, loss_fn, x, y = training_step.tiny_regression()
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    assert torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")) > 10 * EXAMPLE_STEP["max_norm"]


def clip_late(model, optimizer, loss_fn, x, y, max_norm=1.0):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.item()


def test_train_step_check_diagnoses_clipping_after_the_step():
    with pytest.raises(GradingError, match="unclipped gradients"):
        training_step.check_train_step("train_step", clip_late, KEY.train_step, seed=5, max_norm=0.5)
    with pytest.raises(GradingError, match="unclipped gradients"):
        training_step.check_train_step_example("train_step", clip_late, **EXAMPLE_STEP)
    with pytest.raises(GradingError, match="added in: call optimizer.zero_grad"):
        training_step.check_train_step_example("train_step", step_on_stale, **EXAMPLE_STEP)


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
        training_step.check_train_step_keeps_no_graph("train_step", retains, seed=6, steps=5)
    kept.clear()
    with pytest.raises(GradingError, match="still held"):
        training_step.check_train_step_keeps_no_graph("train_step", stores, seed=7, steps=5)
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
        training_step.check_train_step_keeps_no_graph("train_step", keeps_outputs, seed=8, steps=5)
    kept.clear()


# --- predict -------------------------------------------------------------------------------------
def test_predict_check_accepts_inference_mode_and_repairs_grad_mode():
    prediction.check_predict("predict", predict, seed=1, model_kind="two_heads")

    def switches_off(model, x):
        torch.set_grad_enabled(False)
        with torch.inference_mode():
            return model(x)

    with pytest.raises(GradingError, match="switched off"):
        prediction.check_predict("predict", switches_off, seed=2)
    assert torch.is_grad_enabled()


def test_a_batch_of_one_is_named_where_a_squeeze_drops_it():
    def squeezes(model, x):
        with torch.inference_mode():
            return model(x).squeeze()

    prediction.check_predict("predict", squeezes, seed=3)  # right for a batch of five
    with pytest.raises(GradingError, match="fails for a batch of one: do not .squeeze"):
        prediction.check_predict("predict", squeezes, seed=3, n=1)
    accumulation.check_accumulated_grads("accumulated_grads", accumulate, n=1, k=1, seed=4)
    with pytest.raises(GradingError, match="fails for a batch of one"):
        accumulation.check_accumulated_grads("accumulated_grads", lambda m, f, x, y, k: accumulate(m, f, x, y, k)[1:],
                                             n=1, k=1, seed=4)


# --- trusted grading: the learner's code runs in a driver (in the kernel), the comparisons here ------
class KernelWithoutComparisons(mutation.Loopback):
    """A kernel where the submission has disabled the comparisons it can reach."""

    def ask(self, request, response):
        with mock.patch.object(torch, "allclose", lambda *a, **k: True), \
                mock.patch.object(torch, "equal", lambda *a, **k: True), \
                mock.patch.object(cases, "expect_close", lambda *a, **k: None):
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
from autograder.checks import nb04_toggles
from autograder.grader.keys import answer_key
leaf = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
nb04_toggles.check_grad_fn_names("g", g, [("(x * 2).sum()", lambda: (leaf * 2).sum(),
                                           ["SumBackward0", "MulBackward0", "AccumulateGrad"])])
nb04_toggles.check_grad_fn_names("g", g, nb04_toggles.autograd_graphs(seed=9), answer_key("04_toggles").grad_fn_names)
""",
    "freeze_all_but": """
from autograder.checks import nb04_toggles
nb04_toggles.check_freeze_flags("g", g, nb04_toggles.deep_stack, ["2.weight", "2.bias"], seed=1,
                                frozen_before=("2.bias",))
nb04_toggles.check_freeze_training("g", g, nb04_toggles.lora_net, ["block.lora_A", "head.bias"], seed=2)
nb04_toggles.check_freeze_unknown_name("g", g, nb04_toggles.lora_net, seed=3)
""",
    "distill_loss": """
from autograder.checks import nb04_toggles
from autograder.grader.keys import answer_key
nb04_toggles.check_distill_example("g", g, [[1.0, 2.0, 3.0]], [[3.0, 2.0, 1.0]], 1.0, 1.1504207652)
nb04_toggles.check_distill_value("g", g, answer_key("04_toggles").distill_loss, B=4, C=5, T=2.0, seed=1)
nb04_toggles.check_distill_gradients("g", g, B=4, C=5, T=2.0, seed=1)
nb04_toggles.check_distill_models("g", g, seed=2)
""",
    "per_loss_grads": """
from autograder.checks import nb04_toggles
from autograder.grader.keys import answer_key
nb04_toggles.check_per_loss_example("g", g, [([3.0, 3.0], [3.0]), ([18.0, 36.0], [30.0]), ([2.0, 4.0], [0.0])])
nb04_toggles.check_per_loss_grads("g", g, answer_key("04_toggles").per_loss_grads, seed=1)
""",
    "accumulated_grads": """
from autograder.checks import nb04_toggles
nb04_toggles.check_accumulated_grads("g", g, n=10, k=3, seed=1, frozen=("0.bias",))
nb04_toggles.check_accumulated_grads("g", g, n=96, k=4, seed=2, hidden=64, memory=True)
""",
    "train_step": """
from autograder.checks import nb04_toggles
from autograder.grader.keys import answer_key
nb04_toggles.check_train_step_example("g", g, max_norm=0.5, loss=12.3125,
                                      weight=[[0.469259180084936, -0.9606133244838243]], bias=[0.2480786987553085])
nb04_toggles.check_train_step("g", g, answer_key("04_toggles").train_step, seed=1, max_norm=0.5)
nb04_toggles.check_train_step_keeps_no_graph("g", g, seed=2, steps=5)
""",
    "predict": """
from autograder.checks import nb04_toggles
nb04_toggles.check_predict("g", g, seed=1)
nb04_toggles.check_predict("g", g, seed=2, model_kind="two_heads")
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
    result = per_loss_ok(losses, params)
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


def step_retains(model, optimizer, loss_fn, x, y, max_norm=1.0, _kept=[]):  # noqa: B006 (the leak under test)
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward(retain_graph=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    _kept.append(loss)
    return loss.item()


def step_keeps_losses(model, optimizer, loss_fn, x, y, max_norm=1.0, _kept=[]):  # noqa: B006 (the leak under test)
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
         ("distill_loss", distill), ("per_loss_grads", per_loss_ok), ("accumulated_grads", accumulate),
         ("train_step", step), ("predict", predict)]
WRONG = [
    ("grad_fn_names", lambda t: names_bfs(t)[1:], "the list starts with the root itself"),
    ("grad_fn_names", lambda t: [n for n in names_bfs(t) if n != "AccumulateGrad"], "AccumulateGrad nodes"),
    ("freeze_all_but", freeze_asserts, "raised AssertionError"),
    ("freeze_all_but", freeze_on_data, "wrong requires_grad flags"),
    ("distill_loss", distill_undetached, "a gradient reached the teacher logits"),
    ("per_loss_grads", per_loss_leaves_grad, "w.grad was None before the call and holds a tensor after it"),
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
    if isinstance(answer, (distillation.Backward, accumulation.Call, training_step.GraphWatch, freezing.Caught)):
        return [answer, *_leaves([getattr(answer, f.name) for f in dataclasses.fields(answer)])]
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
    model, loss_fn, x, y = accumulation.regression(1, torch.float64, "cpu", 10)
    stale = [torch.ones_like(p) for p in model.parameters()]
    seen = accumulation.run_accumulation(lambda m, *a: [p.grad.clone() for p in m.parameters()], stale, True,
                             model, loss_fn, x, y, 3)
    assert all(torch.equal(g, s) for g, s in zip(seen.returned, stale)) and seen.peak_saved_bytes == 0
    one = accumulation.run_accumulation(accumulate_one_backward, stale, True, model, loss_fn, x, y, 3)
    assert one.peak_saved_bytes > 0
    watch = training_step.run_training_steps(step_keeps_losses, seed=3, steps=4, dtype=torch.float64)
    assert len(watch.returned) == 4 and watch.live_bytes == [0] * 4
    assert watch.loss_calls == 4 and watch.losses_alive >= 4
    got, is_on = prediction.run_predict(predict_switches_off, model, x)
    assert got.is_inference() and not is_on and torch.is_grad_enabled()
    with torch.no_grad():  # the notebook's own cells switched it off: the call still starts with it on
        assert prediction.run_predict(lambda m, inp: torch.is_grad_enabled(), model, x) == (True, True)
        assert not torch.is_grad_enabled()  # and the kernel is left as it was
