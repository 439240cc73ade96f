"""The by-hand judge reads a submission's source in the grader, and judges only the answers' reach: what a rule
forbids and what the judge cannot type are refused there, with the line and what to write instead; code outside
every reach is never refused (it runs nowhere the by-hand exercises are graded); no reference solution, blank
notebook, honest variant or right answer of the mutation catalogue is refused.

How the reach runs (first, in a fresh kernel) is tested with real kernels in tests/test_by_hand_grading.py."""
import ast
import importlib
import inspect
import re

import course
import mutants
import mutation
import nbformat
import pytest
from test_nbgrader_e2e import source_of, submission

from autograder.grader import judge, notebook_code, reach, reading

ROOT = course.ROOT
ANSWERS = {name: {course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"): c.source
                  for c in course.solution_cells(course.read(course.solution_path(name)))}
           for name in course.assignment_names()}
RELU = "def relu_grad(x):\n    return (x > 0).to(x.dtype)"
EVIL = "def evil(x):\n    x = x.detach().requires_grad_()\n    return torch.autograd.grad(torch.relu(x).sum(), x)[0]"


def notebook(name, answers=None, top=(), after=()):
    """The notebook as students receive it, every answer the reference's but `answers`; `top`: cells of the
    student's own after the set-up cell; `after`: cells of theirs at the end."""
    nb = submission(course.release_path(name), {**ANSWERS[name], **(answers or {})})
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "import torch" in c.source)
    nb.cells[setup + 1:setup + 1] = [nbformat.v4.new_code_cell(source) for source in top]
    nb.cells += [nbformat.v4.new_code_cell(source) for source in after]
    return nb


def verdicts(name, answers=None, top=(), after=()):
    return judge.judge(notebook(name, answers, top, after), judge.baseline(ROOT, name))


# (notebook, graded name, its answer, what the verdict must say). Each kind of issue 28's and issue 36's reviews
# kept full marks before the judge (or before this one), or is a variant of one that did; the last ones are ours.
ANSWER_ATTACKS = [
    # what the rule forbids, however it is named
    ("01_chain_rule", "relu_grad", "from torch.autograd import grad as g\ndef relu_grad(x):\n"
     "    x = x.detach().requires_grad_()\n    return g(torch.relu(x).sum(), x)[0]",
     r"line 1 .* reaches torch\.autograd\.grad: this exercise is by hand"),
    ("01_chain_rule", "relu_grad", "import torch.nn.functional as G\nauto = G.torch.autograd\ndef relu_grad(x):\n"
     "    x = x.detach().requires_grad_()\n    return auto.grad(torch.relu(x).sum(), x)[0]",
     r"line 5 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def slope(x):\n    from torch.func import grad\n    return grad(torch.relu)(x)\n"
     "def relu_grad(x):\n    return torch.stack([slope(v) for v in x.flatten()]).view_as(x)",
     r"line 2 .* reaches torch\.func\.grad"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    x = x.detach().requires_grad_()\n    y = torch.relu(x)\n"
     "    return y.grad_fn(torch.ones_like(y))", r"line 4 .* calls \.grad_fn"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    x = x.detach().requires_grad_()\n    y = torch.relu(x)\n"
     "    return y.grad_fn.next_functions[0][0](torch.ones_like(y))", r"calls \.grad_fn"),
    ("01_chain_rule", "relu_grad", "from torch.autograd import *\ndef relu_grad(x):\n    return grad(x.sum(), x)",
     r"line 3 .* reaches torch\.autograd\.grad"),
    ("03_vjp", "vjp_tanh", "def vjp_tanh(y, g):\n    return torch.ops.aten.tanh_backward(g, y)", r"reaches torch\.ops"),
    ("03_vjp", "vjp_softmax", "def vjp_softmax(y, g, dim=-1):\n"
     "    return torch._softmax_backward_data(g, y, dim, y.dtype)",
     r"reaches torch\._softmax_backward_data, a private part of torch"),
    ("07_by_hand", "batchnorm_backward", "def batchnorm_backward(dout, x, gamma, eps=1e-5):\n"
     "    return torch.batch_norm_backward_elemt(dout, x, x.mean(0), x.var(0), gamma, dout.sum(0), dout.sum(0), None)",
     r"reaches torch\.batch_norm_backward_elemt"),
    ("03_vjp", "unbroadcast", "def unbroadcast(g, shape):\n    return g.sum_to_size(shape)", r"calls \.sum_to_size"),
    ("03_vjp", "StableLogSumExp", "class StableLogSumExp(torch.autograd.Function):\n    @staticmethod\n"
     "    def forward(ctx, x, dim):\n        return torch.special.logsumexp(x, dim)\n",
     r"reaches torch\.special\.logsumexp"),
    ("05_loss_scaling", "DynamicLossScaler", "class DynamicLossScaler(torch.cuda.amp.GradScaler):\n    pass",
     r"reaches torch\.amp\.GradScaler"),
    ("06_checkpointing", "checkpoint", "from torch.utils import checkpoint as c\ndef checkpoint(fn, *args):\n"
     "    return c.checkpoint(fn, *args, use_reentrant=True)", r"reaches torch\.utils\.checkpoint"),
    ("07_by_hand", "batchnorm_backward", "def batchnorm_backward(*args):\n    return F.batch_norm", r"batch_norm"),
    ("08_higher_order", "hvp", "def hvp(f, x, v):\n    return torch.autograd.functional.hvp(f, x, v)[1]",
     r"reaches torch\.autograd\.functional"),
    # what the judge cannot type, used as something to call or to read an attribute from
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    x = x.detach().requires_grad_()\n"
     "    return (torch or 0).autograd.grad(torch.relu(x).sum(), x)[0]",
     r"line 3 .* `\(torch or 0\)\.autograd` cannot be read: .* \(a boolean operator\)"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    x = x.detach().requires_grad_()\n"
     "    y = torch.relu(x).sum()\n    (torch or 0).autograd.variable.Variable._execution_engine.run_backward(\n"
     "        (y,), (torch.ones_like(y),), False, False, (x,), True)\n    return x.grad",
     r"line 4 .* cannot be read"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    m = torch.autograd if x.numel() else None\n"
     "    return m.grad(torch.relu(x.requires_grad_()).sum(), x)[0]", r"line 3 .* \(a conditional expression\)"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return [m := torch.autograd][0].grad(x.sum(), x)",
     r"hands the module torch\.autograd around|`\[\(m := torch\.autograd\)\]\[0\]` is \(an item of a container\)"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    match torch:\n        case T:\n"
     "            return T.autograd.grad(torch.relu(x.requires_grad_()).sum(), x)[0]",
     r"line 4 .* \(a match capture\)"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return getattr(torch, 'auto' + 'grad').grad(x.sum(), x)",
     r"uses getattr with a computed name"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    g = getattr\n"
     "    return g(torch, 'autograd').grad(x.sum(), x)",
     r"line 2 .* uses getattr"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return getattr(torch.autograd, 'grad')(x.sum(), x)",
     r"reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return torch.Tensor.backward(x.sum())", r"reaches torch"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    type(x).backward(x.sum())\n    return x.grad",
     r"calls \.backward"),
    ("01_chain_rule", "relu_grad", "import operator\ndef relu_grad(x):\n"
     "    return operator.attrgetter('autograd.grad')(torch)(x.sum(), x)", r"reads attributes by computed names"),
    # bindings the judge follows to their values
    ("01_chain_rule", "relu_grad", "g, _ = torch.autograd.grad, None\ndef relu_grad(x):\n    return g(x.sum(), x)",
     r"line 1 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    for g in (torch.autograd.grad,):\n"
     "        return g(x.sum(), x)",
     r"line 2 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    with torch.autograd.forward_ad.dual_level() as level:\n"
     "        return level", r"reaches torch\.autograd\.forward_ad"),
    ("01_chain_rule", "relu_grad", EVIL + "\nhelpers = {'slope': evil}\ndef relu_grad(x):\n"
     "    return helpers['slope'](x)", r"line 3 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", EVIL + "\nclass Box:\n    pass\nbox = Box()\nbox.slope = evil\ndef relu_grad(x):\n"
     "    return box.slope(x)", r"line 3 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", EVIL + "\nslopes = []\nslopes.append(evil)\ndef relu_grad(x):\n"
     "    return slopes[0](x)", r"line 3 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def with_grad(f):\n    return lambda x: torch.autograd.grad(f(x).sum(), x)\n"
     "@with_grad\ndef relu_grad(x):\n    return torch.relu(x)", r"line 2 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def setup():\n    global g\n    g = torch.autograd.grad\ndef relu_grad(x):\n"
     "    setup()\n    return g(x.sum(), x)", r"line 3 .* reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x, m=torch):\n    return m.autograd.grad(x.sum(), x)[0]",
     r"hands the module torch around"),
    # reflection, private parts, modules the judge does not read
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    x = x.detach().requires_grad_()\n"
     "    y = torch.relu(x).sum()\n    torch.autograd.variable.Variable._execution_engine.run_backward(\n"
     "        (y,), (torch.ones_like(y),), False, False, (x,), True)\n    return x.grad",
     r"line 4 .* reaches torch\.autograd\.variable\.Variable\._execution_engine, a private part"),
    ("01_chain_rule", "relu_grad", "import importlib\ndef relu_grad(x):\n"
     "    return importlib.import_module('torch.auto' + 'grad').grad(x.sum(), x)", r"imports importlib"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return __import__('torch.autograd', fromlist=['grad'])",
     r"uses __import__"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    try:\n        raise ValueError\n"
     "    except ValueError as e:\n        e.__traceback__.tb_frame.f_back\n    return (x > 0).to(x.dtype)",
     r"reaches \.__traceback__"),
    ("01_chain_rule", "relu_grad", "import sys\ndef relu_grad(x):\n    sys._getframe(1)\n    return x",
     r"line 3 .* reaches sys\._getframe, a private part of sys"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    ().__class__.__base__.__subclasses__()\n    return x",
     r"reaches \.__base__"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return vars(torch)['autograd'].grad(x.sum(), x)",
     r"uses vars"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return Out[3](x)", r"uses IPython's Out"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    get_ipython().run_cell('x = 1')\n    return x",
     r"uses IPython's get_ipython"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    import ctypes\n    return x", r"imports ctypes"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    import helper_i_wrote\n    return helper_i_wrote.slope(x)",
     r"imports helper_i_wrote, which an answer may not use"),
    ("02_micrograd", "draw_dot", "import graphviz\ndef draw_dot(root, what='grad'):\n"
     "    return graphviz.drawn_for_me(root)",
     r"reads graphviz\.drawn_for_me, which does not exist"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return open('/course/solutions/01_chain_rule/key').read()",
     r"uses open"),
    ("01_chain_rule", "relu_grad", "from autograder.checks.nb01_chain_rule import exercises\ndef relu_grad(x):\n"
     "    return exercises.relu_reference(x)", r"uses autograder\.checks"),
    ("03_vjp", "vjp_relu", "def vjp_relu(x, g):\n    with torch._C._DisableTorchDispatch():\n"
     "        return g * (x > 0).to(g.dtype)", r"reaches torch\._C, a private part of torch"),
    ("03_vjp", "vjp_relu", "def vjp_relu(x, g):\n    with (torch or 0)._C._DisableTorchDispatch():\n"
     "        return g * (x > 0).to(g.dtype)", r"cannot be read"),
    # notebook 09 and 10: the maths in kernels
    ("09_kernels", "silu_forward", "@triton.jit\ndef nothing(x_ptr):\n    pass\n\n\ndef silu_forward(x):\n"
     "    nothing[(1,)](x)\n    with torch._C._DisableTorchDispatch():\n        return F.silu(x)",
     r"reaches torch\._C"),
    ("09_kernels", "silu_forward", "import numpy as np\ndef silu_forward(x):\n"
     "    return torch.as_tensor(x.cpu().numpy() / (1 + np.exp(-x.cpu().numpy())))",
     r"uses torch\.as_tensor outside a kernel"),
    ("09_kernels", "silu_forward", "import numpy as np\n@triton.jit\ndef nothing(x_ptr):\n    pass\n\n\n"
     "def numpy_silu(x):\n    y = np.asarray(x.detach().cpu())\n    return y / (1 + np.exp(-y))\n\n\n"
     "helpers = {'silu': numpy_silu}\n\n\ndef silu_forward(x):\n    nothing[(1,)](x)\n"
     "    out = torch.empty_like(x)\n    out.copy_(torch.from_numpy(helpers['silu'](x)))\n    return out",
     r"uses numpy\.asarray outside a kernel"),
    ("09_kernels", "silu_forward", "from torch.utils._python_dispatch import _disable_current_modes\n"
     "def silu_forward(x):\n    with _disable_current_modes():\n        return x * torch.sigmoid(x)",
     r"imports torch\.utils\._python_dispatch, a private part of torch"),
    ("09_kernels", "rmsnorm_backward", "def rmsnorm_backward(grad_out, x, weight, rstd):\n"
     "    return grad_out * x, (grad_out * x).sum(0)", r"calls \.sum\(\) outside a kernel"),
    ("09_kernels", "silu_forward", "@triton.jit\ndef k(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
     "    i = tl.arange(0, BLOCK)\n    tl.store(y_ptr + i, torch.sigmoid(tl.load(x_ptr + i)))\n\n\n"
     "def silu_forward(x):\n    y = torch.empty_like(x)\n    k[(1,)](x, y, BLOCK=1024)\n    return y",
     r"uses torch\.sigmoid inside a Triton kernel"),
    ("10_attention", "flash_forward", "def flash_forward(q, k, v, causal=False):\n"
     "    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)\n"
     "    return o, torch.zeros(q.shape[:-1], dtype=torch.float32, device=q.device)",
     r"uses torch\.nn\.functional\.scaled_dot_product_attention outside a kernel"),
    ("10_attention", "attention_backward", "def attention_backward(q, k, v, o, do, causal=False):\n"
     "    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))\n"
     "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)\n"
     "    return torch.autograd.grad(out, (q, k, v), do)", r"reaches torch\.autograd\.grad"),
]


@pytest.mark.parametrize("name, graded, answer, says", ANSWER_ATTACKS, ids=lambda v: str(v)[:40])
def test_an_answer_that_breaks_its_rule_is_refused_with_the_line_and_the_rule(name, graded, answer, says):
    found = verdicts(name, {graded: answer})
    assert graded in found, f"{graded} not refused: {answer}"
    assert re.search(says, found[graded].message()), found[graded].message()


# A binding in another cell is part of the answer wherever it is: the judge reads the answer the kernel will run.
@pytest.mark.parametrize("cells, says", [
    ([EVIL, "relu_grad, _ = evil, None"], r"line 3 .* reaches torch\.autograd\.grad"),
    ([EVIL, "for relu_grad in (evil,):\n    pass"], r"reaches torch\.autograd\.grad"),
    ([EVIL, "import contextlib\nwith contextlib.nullcontext(evil) as relu_grad:\n    pass"],
     r"reaches torch\.autograd\.grad"),
    (["relu_grad = (torch or 0).autograd.grad"], r"cannot be read"),
    (["import numpy\nrelu_grad = numpy.vectorize(lambda v: float(v > 0))", "del relu_grad"], None),
])
def test_a_rebinding_in_a_later_cell_is_judged_as_the_answer_it_is(cells, says):
    found = verdicts("01_chain_rule", {"relu_grad": RELU}, after=cells)
    if says is None:
        assert "relu_grad" not in found
        return
    assert "relu_grad" in found and re.search(says, found["relu_grad"].message()), found


def test_a_forbidden_call_costs_its_own_exercise_and_those_that_use_it_only():
    """A call the rule forbids refuses the answers that reach it: 09's Functions call its forward and backward,
    and nothing else."""
    assert set(verdicts("01_chain_rule", {"relu_grad": "def relu_grad(x):\n    return torch.func.grad(x)"})) == \
        {"relu_grad"}
    assert set(verdicts("09_kernels", {"silu_forward": "def silu_forward(x):\n    return x * torch.sigmoid(x)"})) == \
        {"silu_forward", "TritonSiLU"}


def test_a_patch_that_runs_as_the_answers_load_costs_every_by_hand_exercise():
    """A statement an answer needs runs where every by-hand exercise is graded: a patch or reflection there (at
    its top level, or in a function it calls as it runs) changes what every answer's names mean."""
    patch = "import torch\nclass Step:\n    torch.relu = torch.abs\n"
    found = verdicts("01_chain_rule", {"relu_grad": patch + RELU.replace("(x > 0)", "(Step and x > 0)")})
    assert set(found) == set(judge.rules_of("01_chain_rule"))
    assert all("changes torch.relu" in v.message() for v in found.values())
    assert "another by-hand answer" in found["sigmoid_grad"].message()
    nested = "def later():\n    torch.relu = torch.abs\n" + RELU.replace("return", "later()\n    return")
    assert set(verdicts("01_chain_rule", {"relu_grad": nested})) == {"relu_grad"}


# Code outside every answer's reach: it runs nowhere the by-hand exercises are graded, so it is never refused
# (the flags list it for the instructor).
OUTSIDE_THE_REACH = [
    "from autograder import checks\nimport contextlib\n"
    "checks.student_calls._autograd_forbidden = lambda e: contextlib.nullcontext()",
    "enter = torch._C._enter_dual_level\nmake = torch._VF._make_dual",
    "torch.relu = torch.autograd.grad",
    "import base64\nexec(base64.b64decode('cHJpbnQoMSk='))",
    "import builtins\nbuiltins.all = lambda *a: True",
    "import sys\nsys.settrace(None)",
    "def patch():\n    setattr(torch, 'relu', None)\npatch()",
    "%run helper.py",
    "import helper_i_wrote",
    "from unittest import mock\nmock.patch('torch.relu', torch.abs).start()",
    "%%writefile graphviz.py\ndef Digraph(*a, **k):\n    return None",
    "import sys\nsys.path.insert(0, '.')",
    "from autograder.checks import kernel_guard\nkernel_guard.run_guarded = lambda *a, **k: None",
    # honest code that the previous judge refused, every by-hand point of the notebook
    "from IPython.display import display\ndisplay(torch.ones(2))",
    "print([n for n in dir(torch) if 'grad' in n])",
    "try:\n    from google.colab import drive\nexcept ImportError:\n    pass",
    "import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()",
    "%load_ext autoreload\n%autoreload 2",
    "from torch.utils._python_dispatch import TorchDispatchMode\nclass Count(TorchDispatchMode):\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        return func(*args, **(kwargs or {}))",
    "help(F)", "print(torch)", "import inspect\nprint(inspect.signature(relu_grad))", "%%writefile notes.txt\nmine",
    "%debug", "print(vars(torch.nn.Linear(2, 2)))", "import pandas", "%timeit relu_grad(torch.ones(3))",
    "import sqlite3\nfrom tqdm.auto import tqdm", "torch.backends.cudnn.deterministic = True",
    "import os\nprint(os.getcwd())", "torch.manual_seed(0)\nplt.rcParams['figure.dpi'] = 80",
]


@pytest.mark.parametrize("cell", OUTSIDE_THE_REACH, ids=lambda v: v[:40])
def test_code_outside_the_answers_is_never_refused(cell):
    nb = notebook("01_chain_rule", {"relu_grad": RELU}, top=[cell], after=[cell])
    examination = judge.examine(nb, judge.baseline(ROOT, "01_chain_rule"))
    assert examination.verdicts == {}
    program = "\n".join(p.source for p in examination.program)
    assert not any(line.strip() and line.strip() in program for line in cell.splitlines() if "=" in line), program


# Honest answers the previous judge refused: inside the answer, each is an allow-listed form.
def _renamed(source, old, new):
    return re.sub(rf"\b{old}\b", new, source)


HONEST_ANSWERS = [
    ("03_vjp", "Tensor", _renamed(ANSWERS["03_vjp"]["Tensor"], "_backward", "grad_fn")),
    ("03_vjp", "StableLogSumExp", ANSWERS["03_vjp"]["StableLogSumExp"].replace(
        "ctx.save_for_backward(x, out)", "ctx.save_for_backward(x)\n        ctx.logsumexp = out").replace(
        "x, out = ctx.saved_tensors", "(x,), out = ctx.saved_tensors, ctx.logsumexp")),
    ("07_by_hand", "batchnorm_backward", "class Norm:\n    def batch_norm(self, x, eps):\n"
     "        mean = x.mean(0)\n        return (x - mean) * ((x - mean) ** 2).mean(0).add(eps).rsqrt()\n\n\n"
     "def batchnorm_backward(dout, x, gamma, eps=1e-5):\n    N = x.shape[0]\n    x_hat = Norm().batch_norm(x, eps)\n"
     "    rstd = (((x - x.mean(0)) ** 2).mean(0) + eps) ** -0.5\n"
     "    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)\n"
     "    return gamma * rstd / N * (N * dout - dbeta - x_hat * dgamma), dgamma, dbeta"),
    ("09_kernels", "silu_forward", ANSWERS["09_kernels"]["silu_forward"].replace(
        "    x = x.contiguous()  # the kernel reads flat memory",
        "    x = x.contiguous()  # the kernel reads flat memory\n    assert x.ravel().numel() == x.nbytes // "
        "x.dtype.itemsize\n    _ = x.swapaxes(0, -1) if x.dim() else x\n    if x.is_cuda:\n"
        "        torch.cuda.synchronize()")),
    ("10_attention", "flash_forward", ANSWERS["10_attention"]["flash_forward"].replace(
        "def flash_forward(", "def flash_forward_parts(q):\n    return q.swapaxes(1, 2).nbytes, q.dtype.itemsize\n\n\n"
        "def flash_forward(")),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    if not isinstance(x, torch.Tensor):\n"
     "        raise TypeError(f'expected a tensor, got {type(x).__name__}')\n    mask = x > 0\n"
     "    return mask.to(x.dtype) if mask.any() or x.numel() else x.new_zeros(x.shape)"),
    ("01_chain_rule", "relu_grad", "import sys\nimport warnings\n\n\ndef relu_grad(x):\n"
     "    warnings.warn('noisy')\n    print('chatter', file=sys.stderr)\n    return (x > 0).to(x.dtype)"),
    ("01_chain_rule", "relu_grad", "import collections\nimport functools\nimport math\n\n\n"
     "@functools.lru_cache(maxsize=None)\ndef zero():\n    return 0.0\n\n\n"
     "Slope = collections.namedtuple('Slope', 'below above')\n\n\n"
     "def relu_grad(x):\n    slope = Slope(zero(), math.cos(0.0))\n"
     "    return torch.where(x > 0, slope.above, slope.below).to(x.dtype)"),
]


@pytest.mark.parametrize("name, graded, answer", HONEST_ANSWERS, ids=lambda v: str(v)[:40])
def test_an_honest_answer_is_never_refused(name, graded, answer):
    found = verdicts(name, {graded: answer})
    assert graded not in found, found[graded].message()


def _released_globals(name) -> list:
    """Names the notebook as released binds outside its answer cells (its own helpers, data, constants)."""
    nb = course.read(course.release_path(name))
    answers = {id(c) for c in course.solution_cells(nb)}
    cells = [c for c in notebook_code.code_cells(nb) if id(nb.cells[c.number - 1]) not in answers]
    return sorted({n for s in reach.statements(cells, frozenset()) for n in s.binds})


@pytest.mark.parametrize("name", sorted(n for n in course.assignment_names() if judge.rules_of(n)))
def test_an_answer_may_read_any_global_the_release_binds(name):
    """Every such global read at the top of an answer's body at once (the by-hand exercise with the most points
    of the notebook): the course's values are the course's."""
    graded = sorted(judge.rules_of(name))[0]
    tree = ast.parse(ANSWERS[name][graded])
    names = _released_globals(name)
    tree.body[0].body[:0] = ast.parse("\n".join(f"_seen_{i} = {n}" for i, n in enumerate(names))).body
    found = verdicts(name, {graded: ast.unparse(tree)})
    assert graded not in found, found[graded].message()


def test_the_released_cells_are_the_courses_even_where_a_student_adds_to_them():
    """The Colab cell reads sys.modules and imports importlib: the course's statements; one the student adds to
    an answer's reach is the student's."""
    nb = notebook("01_chain_rule")
    colab = next(c for c in nb.cells if c.cell_type == "code" and "google.colab" in c.source)
    assert judge.judge(nb, judge.baseline(ROOT, "01_chain_rule")) == {}
    colab.source += "\nslope = sys.modules['torch'].autograd.grad"
    assert judge.judge(nb, judge.baseline(ROOT, "01_chain_rule")) == {}  # outside every answer
    found = verdicts("01_chain_rule", {"relu_grad": "import sys\ndef relu_grad(x):\n"
                                                     "    return sys.modules['torch'].autograd.grad(x.sum(), x)"})
    assert "reaches sys.modules, a part of the interpreter" in found["relu_grad"].message()


@pytest.mark.parametrize("name", course.assignment_names())
def test_no_reference_solution_and_no_blank_notebook_is_refused(name):
    base = judge.baseline(ROOT, name)
    assert judge.judge(course.read(course.solution_path(name)), base) == {}
    assert judge.judge(course.read(course.release_path(name)), base) == {}


def _catalogue_cells(fn, graded, name) -> list:
    """A right entry pasted as a student would: with what it reads of its module (`mutation.pasted_source`); an
    entry that imports helpers of its catalogue module gets that module, its registrations left out, in a cell
    of its own before it."""
    pasted = mutation.pasted_source(fn, graded, mutation.notebook_names(name))
    if pasted is not None:
        return [pasted]
    answer = source_of(fn, graded)
    helpers = re.findall(r"^\s*from (mutants\.\w+) import .*$", answer, flags=re.M)
    cells = []
    for module in dict.fromkeys(helpers):
        tree = ast.parse(inspect.getsource(importlib.import_module(module)))
        tree.body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and n.module == "mutants")]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                node.decorator_list = []
        cells.append(ast.unparse(tree))
    return cells + [re.sub(r"^\s*from mutants\.\w+ import .*$", "", answer, flags=re.M)]


def _judged_entries():
    found = []
    for notebook_name, names in mutants.load_all().items():
        for graded, kinds in names.items():
            if graded in judge.rules_of(notebook_name):
                found += [(notebook_name, graded, label, fn) for label, fn in kinds["right"] if callable(fn)]
    return found


@pytest.mark.parametrize("case", _judged_entries(), ids=lambda c: f"{c[0]}:{c[1]}:{c[2]}")
def test_no_right_answer_of_the_catalogue_is_refused(case):
    name, graded, label, fn = case
    *helpers, answer = _catalogue_cells(fn, graded, name)
    nb = notebook(name, {graded: answer}, top=helpers)
    found = judge.judge(nb, judge.baseline(ROOT, name))
    assert graded not in found, (label, found[graded].message())


def _refusing(keyword) -> bool:
    """`no_autograd=True`, `forbid=` some calls (not a parameter passed on, not empty), or a rule's guards
    (`**guards_of(BY_HAND, exercise)`)."""
    value = keyword.value
    if keyword.arg is None:
        return isinstance(value, ast.Call) and getattr(value.func, "id", None) in ("guards_of", "guards")
    if keyword.arg == "no_autograd":
        return isinstance(value, ast.Constant) and value.value is True
    return keyword.arg == "forbid" and not isinstance(value, ast.Name) and not (
        isinstance(value, ast.Tuple) and not value.elts)


def guarding_functions() -> set:
    """Names of the functions of autograder/checks that refuse autograd or forbid a call (the guards of a rule,
    `no_autograd=True`, `forbid=...`, a run under `guarded`, notebook 09's kernel guard), directly or through
    another of them (by name: a helper of the same name elsewhere counts too, which can only add grade cells)."""
    calls, guards = {}, set()
    for path in (ROOT / "autograder" / "checks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = list(ast.walk(node))
                if any(isinstance(k, ast.keyword) and _refusing(k) for k in inner) or node.name in (
                        "run_guarded", "guarded"):
                    guards.add(node.name)
                calls.setdefault(node.name, set()).update(  # called or handed on (functools.partial(run_guarded, ...))
                    n.id if isinstance(n, ast.Name) else n.attr for n in inner
                    if isinstance(n, (ast.Name, ast.Attribute)))
    while True:
        more = {name for name, called in calls.items() if called & guards} - guards
        if not more:
            return guards
        guards |= more


def test_the_rules_cover_every_grade_cell_whose_checks_refuse_autograd_or_a_call():
    """A grade cell whose checks ask for no autograd or forbid a call (directly, or through a check helper that
    does) must have its rule in its package's BY_HAND, so that the judge holds it too."""
    guards = guarding_functions()
    assert {"check_vjp", "check_batchnorm_backward", "check_silu_forward", "check_against_gradscaler"} <= guards
    missing = []
    for name in course.assignment_names():
        for cell in course.grade_cells(course.read(course.solution_path(name))):
            graded = course.graded_name(course.nbgrader_meta(cell)["grade_id"])
            called = {c.func.id if isinstance(c.func, ast.Name) else c.func.attr
                      for c in ast.walk(ast.parse(cell.source))
                      if isinstance(c, ast.Call) and isinstance(c.func, (ast.Name, ast.Attribute))}
            if called & guards and graded not in judge.rules_of(name):
                missing.append((name, graded, sorted(called & guards)))
    assert missing == [], f"grade cells with a by-hand rule the judge does not hold: {missing}"


def test_code_nested_too_deeply_to_read_is_refused_not_a_crash():
    deep = "def relu_grad(x):\n    return " + " + ".join(["x"] * 2000)  # Python compiles it; walking it recurses
    found = verdicts("01_chain_rule", {"relu_grad": deep})
    assert found and all("too deeply" in v.message() for v in found.values())


def test_every_refusal_names_the_cell_and_the_line_it_read():
    nb = notebook("01_chain_rule", {"relu_grad": "def relu_grad(x):\n    return torch.autograd.grad(x.sum(), x)"})
    found = judge.cell_verdicts(nb, judge.baseline(ROOT, "01_chain_rule"))
    cell = next(i for i, c in enumerate(nb.cells, start=1) if c.source.startswith("def relu_grad"))
    assert set(found) == {"relu_grad"}
    assert f"cell {cell}, line 2 (return torch.autograd.grad(x.sum(), x))" in found["relu_grad"]


def test_the_program_holds_the_answers_reach_and_nothing_else():
    """The released set-up statements the answers read, the answers, the later rebinding; not the patch of a
    module, the exploration cell, nor a statement that only calls an answer."""
    nb = notebook("01_chain_rule", {"relu_grad": RELU}, top=["torch.relu = None", "explore = torch.ones(3) * 2"],
                  after=["relu_grad(torch.ones(2))", "slope = 0.0\nrelu_grad = lambda x: (x > slope).to(x.dtype)"])
    program = "\n".join(p.source for p in judge.examine(nb, judge.baseline(ROOT, "01_chain_rule")).program)
    assert "import torch" in program and "def sigmoid_grad" in program and "slope = 0.0" in program
    assert "relu_grad = lambda x" in program and "(x > 0)" in program
    assert "torch.relu = None" not in program and "explore" not in program and "relu_grad(torch.ones(2))" not in program
    assert all(reach.unchanged_by_ipython(p.source) for p in judge.examine(nb, judge.baseline(ROOT, "01_chain_rule"))
               .program)


def test_a_code_magics_statements_are_the_cells_own():
    """`%%time` around an answer defines it all the same: the program holds the answer, not the magic."""
    nb = notebook("01_chain_rule", {"relu_grad": "%%time\n" + RELU})
    examination = judge.examine(nb, judge.baseline(ROOT, "01_chain_rule"))
    assert examination.verdicts == {}
    assert any("def relu_grad" in p.source and "%%time" not in p.source for p in examination.program)


def test_a_finding_of_the_flags_knows_its_lines():
    source = "import torch\nx = (torch.\n     _C)"
    cell = notebook_code.Cell(1, source, ast.parse(source), test=False)
    reader = reading.Reader(notebook_code.NotebookCode([cell]))
    reader.read_cell(cell)
    assert [(f.site.line, list(f.lines)) for f in reader.findings] == [(2, [2, 3])]
