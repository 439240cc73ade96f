"""`train_by_hand(params, data, steps, lr)`: plain SGD with the learner's own gradients, compared step
by step with an autograd-trained twin (`twin_training`): each step's loss, then the final parameters.
Hints name an update that never lands or climbs, one batch used for every step, and a loss recorded
after the update.
"""
import torch

from autograder import checks
from autograder.checks.nb07_by_hand.calls import guarded
from autograder.checks.nb07_by_hand.manual_backward import loss_and_grads, model_sizes, random_params
from autograder.checks.nb07_by_hand.model import PARAM_NAMES, forward
from autograder.checks.nb07_by_hand.verdicts import CLOSE
from autograder.learner import inputs
from autograder.learner.device import get_device


def training_case(vocab, context, embed, hidden, batch, n_batches, steps, lr, *, seed, dtype=torch.float64,
                  device=None):
    """{params, data, steps, lr}: random parameters and n_batches batches of (tokens, targets)."""
    device = device or get_device()
    params = random_params(vocab, context, embed, hidden, seed=seed, dtype=dtype, device=device)
    data = [(inputs.randint(vocab, batch, context, seed=seed + 10 + 2 * i, device=device),
             inputs.randint(vocab, batch, seed=seed + 11 + 2 * i, device=device)) for i in range(n_batches)]
    return {"params": params, "data": data, "steps": steps, "lr": lr}


def twin_training(params, data, steps, lr, loss_after_update=False):
    """(losses, final parameters) of plain SGD with autograd's gradients: step i takes
    data[i % len(data)], records its loss, then p -= lr * grad (`loss_after_update`: a slip, for
    hints, that records the loss of the batch after the update instead)."""
    leaves = {name: params[name].detach().clone() for name in PARAM_NAMES}
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        loss, grads = loss_and_grads(leaves, tokens, targets)
        leaves = {name: leaves[name] - lr * grads[name] for name in PARAM_NAMES}
        losses.append(float(forward(leaves, tokens, targets)[0] if loss_after_update else loss))
    return losses, leaves


def run_training(fn, params, data, steps, lr):
    """Driver: the learner's fn(params, data, steps, lr) on the given copies; returns what it
    returned and the parameters it left in the dict."""
    result = fn(params, data, steps, lr)
    return result, {name: value for name, value in params.items()}


def _training_hint(got_losses, case):
    params, data, steps, lr = case.values()
    for what, twin in (("your parameters never change: update them in place (params[name] -= lr * grad) "
                        "or store the new tensors back into the dict", (params, data, steps, 0.0)),
                       ("the parameters move uphill: SGD subtracts lr * grad", (params, data, steps, -lr)),
                       ("every step uses the first batch: step i takes data[i % len(data)]",
                        (params, data[:1], steps, lr)),
                       ("each loss is the batch's loss after the update: record the loss the step's forward pass "
                        "computed, before updating", (params, data, steps, lr, True))):
        losses = twin_training(*twin)[0]
        if torch.allclose(torch.tensor(got_losses, dtype=torch.float64), torch.tensor(losses, dtype=torch.float64),
                          **CLOSE):
            return what
    return ""


def check_train_by_hand(exercise, fn, cases):
    """Step by step, `fn`'s losses equal an autograd-trained twin's, and so do the final parameters."""
    for case in cases:
        losses, final = twin_training(*case.values())
        p = case["params"]
        shown = {"model": model_sizes(p, case["data"][0][0].shape[1]),
                 "data": f"{len(case['data'])} batches of {case['data'][0][0].shape[0]} examples",
                 "steps": case["steps"], "lr": case["lr"]}
        got, params_after = guarded(exercise, fn, list(case.values()), shown, driver=run_training)
        if not isinstance(got, (list, tuple)) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                         for v in got):
            checks.fail(exercise, "should return a list of Python floats, one loss per step (loss.item()), got "
                                  f"{checks.describe(got)}", shown)
        if len(got) != len(losses):
            checks.fail(exercise, f"returned {len(got)} losses for {len(losses)} steps", shown)
        for step, (g, e) in enumerate(zip(got, losses)):
            if abs(g - e) > 1e-9 + 1e-7 * abs(e):
                agree = "step 0 agrees" if step == 1 else f"steps 0 to {step - 1} agree"
                where = ("the first step's loss is already wrong: the forward pass, or the batch it used"
                         if step == 0 else f"{agree}, so the update after step {step - 1} (gradient or SGD step) "
                                           "is where they part")
                hint = _training_hint(got, case)
                checks.fail(exercise, f"the loss of step {step} is {g:.10g}; the autograd-trained twin's is {e:.10g}",
                            shown, f"  {where}" + (f"\n  hint: {hint}" if hint else ""))
        if not isinstance(params_after, dict) or any(n not in params_after for n in PARAM_NAMES):
            checks.fail(exercise, "the parameter dict lost some of its entries", shown)
        for name in PARAM_NAMES:
            checks.expect_close(exercise, params_after[name], final[name], inputs=shown,
                                names=[f"parameter {name} after {case['steps']} steps"])
