"""The checks of a learner's `Neuron`, `Layer` and `MLP` (micrograd's nn.py), against the same
network in PyTorch with the learner's own weights.

A driver builds the learner's MLP in the learner's kernel (weights drawn from Python's global
`random`, seeded there and put back after), runs it and its loss backward, and returns the
parameters' data and grads as floats in micrograd's order: layer by layer, neuron by neuron, the
weights then the bias. The grader copies those weights into a float64 PyTorch network and compares
outputs and every gradient.
"""
import contextlib
import random

import torch

from autograder.checks import GradingError
from autograder.checks.nb02_micrograd import drivers
from autograder.checks.nb02_micrograd.values import float_or_none, number, shown, text, within_float64_tolerance
from autograder.learner.device import get_device


@contextlib.contextmanager
def _seeded_global_random(seed):
    """Seed Python's global `random` (weights are drawn from it) and put its state back after."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def _learner_mlp(exercise, MLP, nin, nouts, seed):
    """(model, its parameters(), their data as floats), in the learner's kernel; the weights are drawn
    from the kernel's global `random`, seeded."""
    with _seeded_global_random(seed):
        model = drivers.learner_step(exercise, lambda: MLP(nin, list(nouts)), what=f"MLP({nin}, {list(nouts)})")
    params = drivers.learner_step(exercise, lambda: list(model.parameters()), what="model.parameters()")
    values = drivers.learner_step(exercise, lambda: [number(getattr(p, "data", None)) for p in params],
                                  what="reading the parameters' data")
    return model, params, values


def _param_values(exercise, answer, nin, nouts):
    """The learner's parameters' data from a driver's answer: as many as MLP(nin, nouts) has, numbers."""
    values = drivers.part_of(exercise, answer, "params")
    if not isinstance(values, (list, tuple)):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the parameters)")
    sizes = [nin] + list(nouts)
    expected = sum((sizes[k] + 1) * sizes[k + 1] for k in range(len(nouts)))
    if len(values) != expected:
        raise GradingError(
            f"{exercise}: MLP({nin}, {list(nouts)}).parameters() returned {len(values)} parameters, expected "
            f"{expected}: every neuron has one weight per input plus one bias, and parameters() must collect "
            "them from every layer and every neuron")
    values = [float_or_none(v) for v in values]
    if None in values:
        k = values.index(None)
        raise GradingError(f"{exercise}: {_param_name(k, nin, nouts)} of MLP({nin}, {list(nouts)}) has no numeric "
                           "`.data`: parameters() must return the model's Values")
    return values


def _param_name(k, nin, nouts):
    sizes = [nin] + list(nouts)
    for layer in range(len(nouts)):
        per_neuron = sizes[layer] + 1
        block = per_neuron * sizes[layer + 1]
        if k < block:
            neuron, slot = divmod(k, per_neuron)
            what = "its bias" if slot == sizes[layer] else f"weight {slot}"
            return f"parameter #{k} (layer {layer}, neuron {neuron}, {what})"
        k -= block
    return f"parameter #{k}"


class _TorchMLP:
    """The same MLP in PyTorch, float64, its weights copied from the learner's parameters' data
    (`values`) in micrograd's order: layer by layer, neuron by neuron, the neuron's weights then
    its bias."""

    def __init__(self, values, nin, nouts, device):
        sizes, k = [nin] + list(nouts), 0
        self.layers = []
        for n_in, n_out in zip(sizes, sizes[1:]):
            block = torch.tensor(values[k:k + (n_in + 1) * n_out], dtype=torch.float64, device=device)
            block = block.view(n_out, n_in + 1)
            self.layers.append((block[:, :n_in].clone().requires_grad_(), block[:, n_in].clone().requires_grad_()))
            k += (n_in + 1) * n_out
        self.device = device

    def __call__(self, x):
        h = torch.tensor(x, dtype=torch.float64, device=self.device)
        for depth, (W, b) in enumerate(self.layers):
            h = W @ h + b
            if depth < len(self.layers) - 1:
                h = torch.relu(h)
        return list(h)

    def parameters(self):
        """0-d views of every weight and bias, in micrograd's order."""
        return [t for W, b in self.layers for j in range(W.shape[0]) for t in (*W[j], b[j])]

    def grads(self):
        return [g for W, b in self.layers for j in range(W.shape[0])
                for g in (*W.grad[j].tolist(), b.grad[j].item())]


def _samples(seed, count, nin):
    rng = random.Random(seed)
    xs = [[rng.uniform(-2, 2) for _ in range(nin)] for _ in range(count)]
    ys = [rng.choice((-1.0, 1.0)) for _ in range(count)]
    return xs, ys


def _learner_outputs(exercise, model, xs, n_out):
    """model(x) for every x, in the learner's kernel: (lists of n_out learner Values, or None when an
    output has the wrong shape; a report per output: the outputs' data as a list of floats, or,
    for the first one of the wrong shape, a dict saying what it is)."""
    raw = drivers.learner_step(exercise, lambda: [model(x) for x in xs], what="model(x)")

    def shapes():
        outs, report = [], []
        for out in raw:
            sequence = isinstance(out, (list, tuple))
            if n_out == 1 and not sequence:
                out = [out]
            elif n_out == 1 or not sequence or len(out) != n_out:
                report.append({"sequence": sequence, "type": type(out).__name__,
                               "length": len(out) if sequence else None, "text": text(out)})
                return None, report
            outs.append(list(out))
            report.append([number(getattr(s, "data", None)) for s in out])
        return outs, report

    return drivers.learner_step(exercise, shapes, what="reading the outputs of model(x)")


def _checked_outputs(exercise, report, n_out, count):
    """The outputs' data from a driver's report, once every output has the right shape."""
    if not isinstance(report, (list, tuple)):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the outputs)")
    for out in report:
        if isinstance(out, dict):
            if n_out == 1:
                raise GradingError(f"{exercise}: with one output neuron, model(x) should return that Value itself "
                                   f"(as micrograd's Layer does), but it returned a {out.get('type')} of "
                                   f"{out.get('length')}: make Layer.__call__ return out[0] when the layer has one "
                                   "neuron")
            raise GradingError(f"{exercise}: with {n_out} output neurons, model(x) should return a list of {n_out} "
                               f"Values, got {out.get('text')}")
    outs = drivers.sized(exercise, report, count, "the outputs")
    return [[float_or_none(s) for s in drivers.sized(exercise, out, n_out, "the outputs")] for out in outs]


def _loss(outs, ys, kind, params=(), alpha=1e-3):
    """One loss for learner Values and tensors alike: the mean hinge loss of micrograd's demo, or
    the mean squared error, plus alpha times the sum of squared parameters."""
    total = 0
    for out, y in zip(outs, ys):
        for s in out:
            total = total + ((1 + -y * s).relu() if kind == "hinge" else (s - y) ** 2)
    total = total * (1.0 / len(outs))
    for p in params:
        total = total + alpha * (p * p)
    return total


def _learner_grads(exercise, params):
    return drivers.learner_step(exercise, lambda: [number(getattr(p, "grad", None)) for p in params],
                                what="reading the parameters' grads")


def _learner_backward(exercise, outs, ys, kind, params=()):
    """The learner's loss of the outputs (see `_loss`), then loss.backward(), each a learner step."""
    total = drivers.learner_step(exercise, lambda: _loss(outs, ys, kind, params),
                                 what=f"the {kind} loss of the outputs")
    drivers.learner_step(exercise, lambda: total.backward(), what="loss.backward()")


def run_mlp_gradients(exercise, MLP, nin, nouts, seed, xs, ys, loss):
    """Driver: MLP(nin, nouts) (seeded), its outputs on xs, `loss` and loss.backward();
    {"params": data, "outputs": report, "grads": grads}, or an "error" after the data gathered."""
    model, params, values = _learner_mlp(exercise, MLP, nin, nouts, seed)
    answer = {"params": values}
    try:
        outs, answer["outputs"] = _learner_outputs(exercise, model, xs, nouts[-1])
        if outs is not None:
            _learner_backward(exercise, outs, ys, loss, params)
            answer["grads"] = _learner_grads(exercise, params)
    except GradingError as err:  # reported after what was gathered before it
        answer["error"] = str(err)
    return answer


def check_mlp_gradients(exercise, MLP, nin, nouts, *, seed, samples=6, loss="hinge", device=None):
    """Outputs and every parameter's gradient of MLP(nin, nouts) on a seeded batch, against the
    same network in PyTorch with the learner's weights."""
    xs, ys = _samples(seed + 1, samples, nin)
    answer = drivers.drive(exercise, run_mlp_gradients, exercise, MLP, nin, list(nouts), seed, xs, ys, loss)
    values = _param_values(exercise, answer, nin, nouts)
    reference = _TorchMLP(values, nin, nouts, device or get_device())
    outs = _checked_outputs(exercise, drivers.part_of(exercise, answer, "outputs"), nouts[-1], len(xs))
    ref_outs = [reference(x) for x in xs]
    for x, out, ref in zip(xs, outs, ref_outs):
        for j, (got, r) in enumerate(zip(out, ref)):
            if not within_float64_tolerance(got, r.item()):
                raise GradingError(
                    f"{exercise}: MLP({nin}, {list(nouts)}) on x = {[round(v, 4) for v in x]}: output {j} is "
                    f"{shown(got)}, expected {shown(r.item())} (the same weights in PyTorch). Each neuron computes "
                    "relu(w . x + b) in the hidden layers and w . x + b in the last one (nonlin=False); "
                    "parameters() lists the weights in micrograd's order: layer by layer, neuron by neuron, "
                    "the weights, then the bias.")
    grads = drivers.sized(exercise, drivers.part_of(exercise, answer, "grads"), len(values), "the parameters' grads")
    _loss(ref_outs, ys, loss, reference.parameters()).backward()
    for k, (got, expected) in enumerate(zip(grads, reference.grads())):
        got = float_or_none(got)
        if not within_float64_tolerance(got, expected):
            raise GradingError(
                f"{exercise}: MLP({nin}, {list(nouts)}), {loss} loss on {samples} samples: wrong gradient for "
                f"{_param_name(k, nin, nouts)}: expected {shown(expected)} (PyTorch, same weights), got {shown(got)}")


def run_zero_grad(exercise, MLP, nin, nouts, seed, xs, ys):
    """Driver: MLP(nin, nouts) (seeded); whether parameters() gives the same objects twice; every
    grad set to 0.5, then zero_grad(); then two forward + backward passes without zero_grad().
    {"params", "same", "zeroed": [[grad, its repr]...], "passes": [output reports], "grads"}, or
    an "error" after the data gathered before it."""
    model, params, values = _learner_mlp(exercise, MLP, nin, nouts, seed)
    answer = {"params": values}
    try:
        again = drivers.learner_step(exercise, lambda: list(model.parameters()), what="model.parameters()")
        answer["same"] = not any(p is not q for p, q in zip(params, again))

        def leave_grads_behind():  # as if an earlier step had left gradients behind
            for p in params:
                p.grad = 0.5
        drivers.learner_step(exercise, leave_grads_behind, what="setting every parameter's grad to 0.5")
        drivers.learner_step(exercise, lambda: model.zero_grad(), what="model.zero_grad()")
        answer["zeroed"] = drivers.learner_step(
            exercise, lambda: [[number(getattr(p, "grad", None)), text(getattr(p, "grad", None))] for p in params],
            what="reading the parameters' grads")
        answer["passes"] = []
        for _ in range(2):  # two forward + backward passes, no zero_grad() in between
            outs, report = _learner_outputs(exercise, model, xs, nouts[-1])
            answer["passes"].append(report)
            if outs is None:
                return answer
            _learner_backward(exercise, outs, ys, "squared")
        answer["grads"] = _learner_grads(exercise, params)
    except GradingError as err:  # reported after what was gathered before it
        answer["error"] = str(err)
    return answer


def check_zero_grad(exercise, MLP, nin, nouts, *, seed, samples=4, device=None):
    """parameters() returns the model's own Values; zero_grad() sets every grad to 0; two backward
    passes without zero_grad() in between add up, as they do in PyTorch."""
    xs, ys = _samples(seed + 1, samples, nin)
    answer = drivers.drive(exercise, run_zero_grad, exercise, MLP, nin, list(nouts), seed, xs, ys)
    values = _param_values(exercise, answer, nin, nouts)
    if drivers.part_of(exercise, answer, "same") is not True:
        raise GradingError(f"{exercise}: two calls of parameters() returned different objects: it must return the "
                           "model's own Values (the ones training updates), not new ones")
    reference = _TorchMLP(values, nin, nouts, device or get_device())
    _loss([reference(x) for x in xs], ys, "squared").backward()
    single = reference.grads()
    zeroed = drivers.sized(exercise, drivers.part_of(exercise, answer, "zeroed"), len(values), "the parameters' grads")
    for k, entry in enumerate(zeroed):
        grad, written = drivers.sized(exercise, entry, 2, "the parameters' grads")
        if float_or_none(grad) != 0.0:
            raise GradingError(f"{exercise}: after model.zero_grad(), {_param_name(k, nin, nouts)} has grad "
                               f"{written}: zero_grad() must set every parameter's grad to 0")
    passes = drivers.part_of(exercise, answer, "passes")
    for report in passes if isinstance(passes, (list, tuple)) else [None]:
        _checked_outputs(exercise, report, nouts[-1], len(xs))
    grads = drivers.sized(exercise, drivers.part_of(exercise, answer, "grads"), len(values), "the parameters' grads")
    if len(passes) != 2:
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the two passes)")
    for k, (got, s) in enumerate(zip(grads, single)):
        got = float_or_none(got)
        if not within_float64_tolerance(got, 2 * s):
            raise GradingError(
                f"{exercise}: two forward + backward passes without zero_grad() should leave twice the gradient "
                f"of one (PyTorch accumulates the same way): {_param_name(k, nin, nouts)} has {shown(got)}, "
                f"expected 2 x {shown(s)} = {shown(2 * s)}")
