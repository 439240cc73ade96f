"""A learner's `torch.autograd.Function` with Triton kernels (notebook 09's TritonSiLU, TritonRMSNorm), run the
way autograd runs them: `apply` on leaves, the backward through `torch.autograd.grad`, then gradcheck in float64.

The driver `run_function` runs where the learner's code runs; each input, grad_out included, sits in
marked memory in its own layout (`layouts`), allocations are marked, as for the graded functions, and
launches are counted in each pass. It returns a `FunctionRun`, as data.
"""
import dataclasses

import torch

from autograder.checks.kernel_guard import Region, guarded, require_triton
from autograder.checks.kernel_layouts import laid_out


@dataclasses.dataclass
class FunctionRun:
    """What apply returned, whether its grad_fn is the class's own, the tensors it saved, the
    gradients, the launches of each pass, where a kernel wrote outside a tensor, and gradcheck's
    verdict as (error type, first line), None when it passed or did not run."""
    out: object = None
    own_node: bool = False
    saved: object = None
    grads: object = None
    forward_launches: int = 0
    backward_launches: int = 0
    wrote_outside: list = dataclasses.field(default_factory=list)
    verdict: object = None


def _gradcheck(cls, values, differentiable, names):
    """gradcheck of `cls.apply` with respect to the differentiable inputs (float64 values)."""
    leaves = [v.detach().clone().requires_grad_(n in differentiable) if isinstance(v, torch.Tensor) else v
              for n, v in zip(names, values)]
    inputs = tuple(leaf for n, leaf in zip(names, leaves) if n in differentiable)

    def apply(*grad_inputs):
        it = iter(grad_inputs)
        return cls.apply(*[next(it) if n in differentiable else v for n, v in zip(names, leaves)])

    try:
        with torch.enable_grad(), guarded(refuse=False):
            torch.autograd.gradcheck(apply, inputs)
    except NotImplementedError:
        raise
    except Exception as err:  # GradcheckError, or whatever backward raised
        lines = str(err).strip().splitlines()
        return type(err).__name__, lines[0] if lines else ""
    return None


def run_function(cls, grad_out, *values, names, differentiable, layouts=None, gradcheck=False):
    """Driver: `cls.apply(*values)` on marked leaves, its saved tensors, the gradients of the
    differentiable inputs along `grad_out` (handed to backward as it is laid out, as autograd hands it on),
    and (with `gradcheck`) gradcheck's verdict. `layouts`: {input name or "grad_out": layout}."""
    require_triton()
    layouts = layouts or {}
    regions = [laid_out(n, v, layouts.get(n)) if isinstance(v, torch.Tensor) else v for n, v in zip(names, values)]
    args = [r.view.requires_grad_(n in differentiable) if isinstance(r, Region) else r for n, r in zip(names, regions)]
    upstream = laid_out("grad_out", grad_out, layouts.get("grad_out"))
    run = FunctionRun()
    with torch.enable_grad(), guarded(refuse=False) as forward:
        out = cls.apply(*args)
    run.forward_launches = forward.launches
    node = getattr(out, "grad_fn", None)
    run.own_node = node is not None and issubclass(getattr(node, "_forward_cls", type(None)), cls)
    run.out = out.detach().clone() if isinstance(out, torch.Tensor) else out
    allocated = list(forward.allocated)
    if run.own_node:
        run.saved = [t.detach().clone() for t in node.saved_tensors]
        leaves = [a for n, a in zip(names, args) if n in differentiable]
        with guarded(refuse=False) as backward:
            grads = torch.autograd.grad(out, leaves, upstream.view, allow_unused=True)
        run.grads = [None if g is None else g.detach().clone() for g in grads]
        run.backward_launches = backward.launches
        allocated += backward.allocated
    everything = [r for r in regions if isinstance(r, Region)] + [upstream] + allocated
    run.wrote_outside = [r.name for r in everything if r.written_outside()]
    if gradcheck and run.own_node:
        run.verdict = _gradcheck(cls, values, differentiable, names)
    return run
