"""The seeded test blocks every checkpointing check runs, plainly and through the learner's implementation.

A `TestBlock` has parameters and dropout and counts its own forward calls; `plain_run` is the reference
run, `student_forward` the learner's outputs checked for a graph. Runs with dropout are seeded explicitly
where they happen, the plain run here and the learner's run inside its driver, with the same seed: the
grader's random generator is not the kernel's, so neither run may depend on the state the other's is in.
"""
import torch
from torch import nn

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb06_checkpointing.rules import BY_HAND
from autograder.checks.rules import guards
from autograder.learner import inputs as draw
from autograder.learner.device import get_device

# What a learner must not call when asked to build checkpointing: the function, the sequential
# helper and the reentrant Function behind them (the non-reentrant path starts in `checkpoint`).
# The Function is listed by its forward and backward: `checks.forbidden` given an autograd
# Function class walks its attributes into `_backward_cls` and back, without end.
FORBIDDEN = guards(BY_HAND["checkpoint"])["forbid"]  # what checkpointing rebuilds: torch's own, watched


# --- test blocks ------------------------------------------------------------------------------------
class TestBlock(nn.Module):
    """A seeded block with parameters and dropout that counts its forward calls.

    kind "single":  f(x) = x + fc2(dropout(gelu(fc1(x))))
    kind "two":     f(x, h) = fc2(dropout(tanh(fc1(x) + h)))               (two inputs needing grad)
    kind "masked":  f(x, mask, scale) = fc2(dropout(gelu(fc1(x))) * mask) * scale
                    (a tensor input that needs no grad and a Python number)
    kind "tuple":   f(x) = (x + fc2(d), d.sum(-1)) with d = dropout(gelu(fc1(x)))   (two outputs)
    kind "indexed": f(x, idx) = (x + fc2(d))[idx]          (int64 row indices, which cannot require grad)
    kind "argmax":  f(x) = (x + fc2(d), d.argmax(-1))       (a second output of integers, with no gradient)
    """

    __test__ = False  # not a pytest test class

    def __init__(self, width, *, seed, p=0.3, kind="single", device=None, dtype=torch.float64, hidden=None):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.fc1 = nn.Linear(width, hidden or 2 * width, dtype=torch.float64)
            self.fc2 = nn.Linear(hidden or 2 * width, width, dtype=torch.float64)
        self.to(device=device or get_device(), dtype=dtype)
        self.drop = nn.Dropout(p)
        self.kind, self.calls = kind, 0

    def forward(self, x, *extra):
        self.calls += 1
        if self.kind == "two":
            return self.fc2(self.drop(torch.tanh(self.fc1(x) + extra[0])))
        d = self.drop(nn.functional.gelu(self.fc1(x)))
        if self.kind == "masked":
            mask, scale = extra
            return self.fc2(d * mask) * scale
        if self.kind == "tuple":
            return x + self.fc2(d), d.sum(-1)
        if self.kind == "indexed":
            return (x + self.fc2(d))[extra[0]]
        if self.kind == "argmax":
            return x + self.fc2(d), d.argmax(-1)
        return x + self.fc2(d)


KINDS = {  # what a failure message says about the block it ran
    "single": "x + fc2(dropout(gelu(fc1(x))))",
    "two": "fc2(dropout(tanh(fc1(x) + h))), two inputs that need grad",
    "masked": "fc2(dropout(gelu(fc1(x))) * mask) * scale: a mask that needs no grad and a Python number",
    "tuple": "(x + fc2(d), d.sum(-1)) with d = dropout(gelu(fc1(x))): two outputs",
    "indexed": "(x + fc2(dropout(gelu(fc1(x)))))[idx]: idx holds int64 row indices, which need no grad",
    "argmax": "(x + fc2(d), d.argmax(-1)) with d = dropout(gelu(fc1(x))): a second output of int64 indices, "
              "which has no gradient",
}


def block_inputs(kind, batch, width, *, seed, device=None, dtype=torch.float64):
    """The arguments of a TestBlock of `kind`: leaves that need grad, except the mask and the scale."""
    device = device or get_device()
    x = draw.randn(batch, width, seed=seed, dtype=dtype, device=device).requires_grad_()
    if kind == "two":
        return [x, draw.randn(batch, 2 * width, seed=seed + 1, dtype=dtype, device=device).requires_grad_()]
    if kind == "masked":
        mask = (draw.randn(batch, 2 * width, seed=seed + 2, dtype=dtype, device=device) > 0).to(dtype)
        return [x, mask, 0.5]
    if kind == "indexed":  # every row once, the first twice: its gradient adds up
        return [x, torch.cat([torch.arange(batch - 1, -1, -1), torch.zeros(1, dtype=torch.long)]).to(device)]
    return [x]


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def upstream(outputs, seed):
    """A seeded upstream gradient for each floating-point output (None for an integer one, which has none)."""
    return [draw.randn(*o.shape, seed=seed + 7 * i, dtype=o.dtype, device=o.device) if o.is_floating_point() else None
            for i, o in enumerate(outputs)]


def upstream_loss(outputs, seed):
    """sum(output * upstream) over the floating-point outputs: backward from it sends each its upstream gradient."""
    return sum((o * u).sum() for o, u in zip(outputs, upstream(outputs, seed)) if u is not None)


def leaves(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def reset(block, args):
    block.zero_grad(set_to_none=True)
    for a in leaves(args):
        a.grad = None
    block.calls = 0


def plain_run(block, args, seed):
    """Outputs, input grads and parameter grads of the block run plainly, RNG seeded with `seed`."""
    reset(block, args)
    torch.manual_seed(seed)
    outs = as_tuple(block(*args))
    upstream_loss(outs, seed).backward()
    return ([o.detach() for o in outs], [a.grad for a in leaves(args)],
            [p.grad.clone() for p in block.parameters()])


def student_forward(exercise, student, block, args, seed):
    """The outputs of student(block, *args), seeded as the plain run, checked for autograd."""
    torch.manual_seed(seed)
    outs = as_tuple(student(block, *args))
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise GradingError(f"{exercise}: output {i} should be a tensor, got {checks.describe(o)}")
        if o.is_floating_point() and (not o.requires_grad or o.grad_fn is None):
            raise GradingError(
                f"{exercise}: output {i} does not require grad, so no gradient can flow back to the inputs "
                "and parameters: return the output of your Function's apply, not a detached tensor or one "
                "computed under torch.no_grad() outside it")
    return outs
