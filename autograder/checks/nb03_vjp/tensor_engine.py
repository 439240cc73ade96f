"""The checks of notebook 03's tiny tensor engine (`Tensor`): expressions written once as text and
evaluated twice, on the learner's `Tensor`s (in a driver, without autograd) and on PyTorch tensors
that require grad; a 2-layer MLP, a training run against autograd's, and a deep chain."""
import dataclasses
import functools
import math

import torch

from autograder import checks
from autograder.checks.nb03_vjp.cases import leaf_copy, private_copy, tensor, tolerances
from autograder.checks.nb03_vjp.rules import BY_HAND
from autograder.checks.nb03_vjp.watch import watched
from autograder.checks.rules import guards_of
from autograder.learner.device import get_device


# --- the tiny tensor engine ------------------------------------------------------------------------
# The learner's Tensors never leave the driver that builds and differentiates the expression: the
# driver hands back each one's .data and .grad (EngineNode), which are compared with PyTorch's here.
@dataclasses.dataclass
class EngineNode:
    """One of the learner's Tensors as data: its .data and .grad, and (when .data is not a tensor)
    how it reads."""
    data: object = None
    grad: object = None
    text: str = ""


def engine_node(node):
    """Driver side: the data of one of the learner's Tensors."""
    data, grad = getattr(node, "data", None), getattr(node, "grad", None)
    text = ""
    if not isinstance(data, torch.Tensor):  # described only when it will be reported
        try:
            text = checks.describe(node)
        except Exception:  # a __repr__ that fails says nothing more than the type
            text = f"a {type(node).__name__}"
    return EngineNode(data, grad, text)


def _engine_nodes(result):
    """(root, {name: leaf}) from what a driver returned: EngineNodes, or nothing usable."""
    root, mine = result if isinstance(result, tuple) and len(result) == 2 else (None, {})
    return root, mine if isinstance(mine, dict) else {}


def _engine_value(exercise, node, what, shown):
    data = getattr(node, "data", None) if isinstance(node, EngineNode) else None
    if not isinstance(data, torch.Tensor):
        got = node.text if isinstance(node, EngineNode) else checks.describe(node)
        checks.fail(exercise, f"{what} should be one of your Tensors, whose .data is a torch tensor; got {got}", shown)
    return data


def _engine_grad(exercise, node, what, shown):
    grad = getattr(node, "grad", None) if isinstance(node, EngineNode) else None
    if not isinstance(grad, torch.Tensor):
        checks.fail(exercise, f"after backward(), {what}.grad should be a torch tensor shaped like its data, got "
              f"{checks.describe(grad)}", shown)
    return grad


def _call_engine(exercise, step, shown, *, time_limit=20.0):
    """checks.call_student for `step` (a driver, with its arguments bound by functools.partial),
    without autograd, with a recursion limit that is the same everywhere; `shown` labels every
    failure (the expression, the model)."""
    return checks.call_student(exercise, functools.partial(run_engine_step, exercise, step, shown), *shown.values(),
                               names=list(shown), time_limit=time_limit,
                               **guards_of(BY_HAND, exercise))


def run_engine_step(exercise, step, shown, *_shown):
    """Driver: step() with the recursion limit capped the same way everywhere; a RecursionError explained."""
    try:
        with checks.recursion_headroom():
            return step()
    except RecursionError as err:
        checks.fail(exercise, f"backward() raised RecursionError ({err}): walk the graph with a loop and "
                    "an explicit stack, not with a function that calls itself", shown)


def evaluate_on_engine(exercise, Tensor, expression, leaves, constants=None, *, shown=None, time_limit=20.0):
    """Evaluate `expression` (text) on the learner's Tensors made from `leaves` (name -> torch
    tensor; `constants` stay plain torch tensors), call backward() on the result, without autograd,
    all in a driver. Returns (EngineNode of the root, {name: EngineNode of that leaf})."""
    shown = shown or {"expression": expression}
    step = functools.partial(run_expression, exercise, Tensor, expression, leaves, constants or {}, shown)
    return _call_engine(exercise, step, shown, time_limit=time_limit)


def run_expression(exercise, Tensor, expression, leaves, constants, shown):
    """Driver: `expression` evaluated on the learner's Tensors made from `leaves` (and the plain
    `constants`), then backward() on its result, watched; EngineNodes of the root and the leaves."""
    mine = {name: Tensor(private_copy(value)) for name, value in leaves.items()}
    root = eval(expression, {"__builtins__": {}}, {**constants, **mine})  # noqa: S307 (grader's own text)
    backward = getattr(root, "backward", None)
    if backward is None:
        checks.fail(exercise, f"the expression gave {checks.describe(root)}, not one of your Tensors", shown)
    with watched(exercise, shown):
        backward()
    return engine_node(root), {name: engine_node(node) for name, node in mine.items()}


def check_engine_expression(exercise, Tensor, expression, shapes, seed, dtype=torch.float64, constants=()):
    """One expression on leaves of the given shapes (and plain-tensor constants): the value of the
    root and every leaf's gradient against PyTorch's."""
    leaves = {name: tensor(shape, seed + i, dtype) for i, (name, shape) in enumerate(shapes.items())}
    plain = {name: tensor(shape, seed + 100 + i, dtype) for i, (name, shape) in enumerate(dict(constants).items())}
    refs = {name: leaf_copy(value) for name, value in leaves.items()}
    with torch.enable_grad():
        ref_root = eval(expression, {"__builtins__": {}}, {**plain, **refs})  # noqa: S307
        ref_grads = torch.autograd.grad(ref_root, list(refs.values()))
    shown = {"expression": expression, **{f"{n} (a Tensor)": v for n, v in leaves.items()},
             **{f"{n} (a plain torch tensor)": v for n, v in plain.items()}}
    root, mine = _engine_nodes(evaluate_on_engine(exercise, Tensor, expression, leaves, plain, shown=shown))
    rtol, atol = tolerances(dtype)
    checks.expect_close(exercise, _engine_value(exercise, root, "the result", shown), ref_root.detach(),
                        inputs=shown, names=["the result's data"], rtol=rtol, atol=atol)
    for name, expected in zip(leaves, ref_grads):
        checks.expect_close(exercise, _engine_grad(exercise, mine.get(name), name, shown), expected, inputs=shown,
                            names=[f"{name}.grad"], rtol=rtol, atol=atol)


def _mlp_params(n_in, hidden, n_out, seed, dtype):
    return {"W1": tensor((n_in, hidden), seed, dtype, scale=1 / math.sqrt(n_in)),
            "b1": tensor((hidden,), seed + 1, dtype, scale=0.1),
            "W2": tensor((hidden, n_out), seed + 2, dtype, scale=1 / math.sqrt(hidden)),
            "b2": tensor((n_out,), seed + 3, dtype, scale=0.1)}


def _mlp_loss(x, y, p):
    residual = (x @ p["W1"] + p["b1"]).relu() @ p["W2"] + p["b2"] + y * -1.0
    return (residual * residual).mean()


def check_engine_mlp(exercise, Tensor, n_in, hidden, n_out, batch, seed, dtype=torch.float64):
    """A 2-layer MLP with a mean squared error, x a Tensor too: loss and all five gradients."""
    x = tensor((batch, n_in), seed, dtype)
    y = tensor((batch, n_out), seed + 10, dtype)
    params = _mlp_params(n_in, hidden, n_out, seed + 20, dtype)
    refs = {name: leaf_copy(v) for name, v in {"x": x, **params}.items()}
    with torch.enable_grad():
        ref_loss = _mlp_loss(refs["x"], y, refs)
        ref_grads = dict(zip(refs, torch.autograd.grad(ref_loss, list(refs.values()))))
    shown = {"model": f"MLP {n_in} -> {hidden} (relu) -> {n_out}, batch {batch}, {dtype}",
             "loss": "r = relu(x @ W1 + b1) @ W2 + b2 + y * -1.0;  loss = (r * r).mean()",
             **{name: v for name, v in {"x": x, **params}.items()}}

    step = functools.partial(run_mlp_loss, exercise, Tensor, {"x": x, **params}, y, shown)
    loss, mine = _engine_nodes(_call_engine(exercise, step, shown))
    rtol, atol = tolerances(dtype)
    checks.expect_close(exercise, _engine_value(exercise, loss, "the loss", shown), ref_loss.detach(), inputs=shown,
                        names=["the loss"], rtol=rtol, atol=atol)
    for name, expected in ref_grads.items():
        checks.expect_close(exercise, _engine_grad(exercise, mine.get(name), name, shown), expected, inputs=shown,
                            names=[f"{name}.grad"], rtol=rtol, atol=atol)


def run_mlp_loss(exercise, Tensor, leaves, y, shown):
    """Driver: the MLP's loss on the learner's Tensors made from `leaves` (x, W1, b1, W2, b2), then
    loss.backward(), watched; EngineNodes of the loss and the leaves."""
    mine = {name: Tensor(private_copy(v)) for name, v in leaves.items()}
    loss = _mlp_loss(mine["x"], y, mine)
    with watched(exercise, shown):
        loss.backward()
    return engine_node(loss), {name: engine_node(node) for name, node in mine.items()}


def toy_regression(n_points=64, seed=0, dtype=torch.float64):
    """x evenly spaced in [-3, 3] (column), y = sin(x) + small noise: the notebook's toy problem."""
    x = torch.linspace(-3, 3, n_points, dtype=dtype, device=get_device())[:, None]
    y = torch.sin(x) + tensor((n_points, 1), seed, dtype, scale=0.05)
    return x, y


def run_engine_training(Tensor, x, y, params, steps, lr):
    """Driver: plain gradient descent with the learner's engine: fresh leaves every step (no zero_grad
    needed), the update done on the torch tensors. Returns (losses, final params)."""
    params = {k: v.clone() for k, v in params.items()}
    losses = []
    for _ in range(steps):
        leaves = {k: Tensor(v.clone()) for k, v in params.items()}
        loss = _mlp_loss(Tensor(x), y, leaves)
        loss.backward()
        losses.append(float(loss.data))
        params = {k: params[k] - lr * leaves[k].grad for k in params}
    return losses, params


def autograd_training(x, y, params, steps, lr):
    """The same training loop with PyTorch's autograd: the reference."""
    params = {k: v.clone() for k, v in params.items()}
    losses = []
    for _ in range(steps):
        leaves = {k: leaf_copy(v) for k, v in params.items()}
        with torch.enable_grad():
            loss = _mlp_loss(x, y, leaves)
            grads = torch.autograd.grad(loss, list(leaves.values()))
        losses.append(float(loss.detach()))
        params = {k: params[k] - lr * gr for k, gr in zip(params, grads)}
    return losses, params


def check_engine_training(exercise, Tensor, hidden=16, steps=150, lr=0.1, seed=0, min_drop=4.0):
    """Train the MLP on the toy regression with the learner's engine and with autograd from the same
    start: every step's loss must match, and the loss must fall by at least `min_drop` times."""
    x, y = toy_regression(seed=seed)
    params = _mlp_params(1, hidden, 1, seed + 1, torch.float64)
    reference, _ = autograd_training(x, y, params, steps, lr)
    shown = {"task": f"MLP 1 -> {hidden} (relu) -> 1 on y = sin(x) + noise, 64 points, {steps} steps of "
                     f"gradient descent with lr = {lr:g}, float64"}
    mine, _ = _call_engine(exercise, functools.partial(run_engine_training, Tensor, x, y, params, steps, lr), shown,
                           time_limit=30.0)
    rtol, atol = tolerances(torch.float64)
    every = max(1, steps // 6)
    trace = "\n".join(f"    step {k:4d}: yours {mine[k]:.8g}, PyTorch {reference[k]:.8g}"
                      for k in list(range(0, steps, every)) + [steps - 1])
    for k, (a, b) in enumerate(zip(mine, reference)):
        if not abs(a - b) <= atol + rtol * abs(b):
            checks.fail(exercise, f"the training loss differs from PyTorch's from step {k} on "
                  f"(yours {a:.10g}, PyTorch {b:.10g}): a gradient is wrong", shown, trace)
    if not mine[-1] * min_drop <= mine[0]:
        checks.fail(exercise, f"the loss fell from {mine[0]:.4g} to {mine[-1]:.4g} only; it should fall by at "
              f"least {min_drop:g} times", shown, trace)


def check_engine_deep(exercise, Tensor, steps=3000, ladder=False, dtype=torch.float64):
    """A chain of 2 * steps operations, then .sum(): t = t * 0.999 + 0.001 (d t_end / d t_0 = 0.999 ** steps),
    or with `ladder`, t = t * 0.5 + t * 0.4999, which uses every node twice (0.9999 ** steps, 3 * steps ops).
    backward must walk it without recursion."""
    start = tensor((3,), 0, dtype)
    step = "t = t * 0.5 + t * 0.4999" if ladder else "t = t * 0.999 + 0.001"
    shown = {"graph": f"{step}, {steps} times, then .sum()"}

    first = _call_engine(exercise, functools.partial(run_deep_chain_first_node, Tensor, start, steps, ladder), shown)
    expected = torch.full_like(start, (0.9999 if ladder else 0.999) ** steps)
    checks.expect_close(exercise, _engine_grad(exercise, first, "t_0", shown), expected, inputs=shown,
                        names=["t_0.grad"], rtol=1e-9, atol=tolerances(dtype)[1])


def run_deep_chain_first_node(Tensor, start, steps, ladder):
    """Driver: the learner's chain of `steps` steps from a Tensor of `start` (see check_engine_deep),
    .sum() and backward(); the EngineNode of the first Tensor."""
    first = Tensor(private_copy(start))
    t = first
    for _ in range(steps):
        t = t * 0.5 + t * 0.4999 if ladder else t * 0.999 + 0.001
    t.sum().backward()
    return engine_node(first)
