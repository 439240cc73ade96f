"""By-hand exercises graded as a class is graded (`backprop-course grade`, sandboxed kernels), in trusted and in
plain mode: every way around a rule scores 0 on the exercise it cheats, with the line; honest code anywhere
keeps full marks; a patch outside the answers is powerless, since the by-hand exercises are graded first, in a
fresh kernel that has run their answers alone (autograder/grader/judge.py, autograder/grader/sandbox.py).

The verdicts themselves, construct by construct, are tested in tests/test_judge.py, without a kernel."""
import re
import shutil

import course
import nbformat
import pytest
from test_classgrade import CELL_SECONDS, SANDBOXED, trimmed
from test_judge import ANSWERS, OUTSIDE_THE_REACH, notebook

from autograder.grader import classgrade
from autograder.grader.sandbox import Limits

# Patches outside every answer: each would change a by-hand verdict if it ran before the by-hand grade cells.
PATCHES = [
    "import contextlib\nfrom autograder import checks\n"
    "checks.student_calls._autograd_forbidden = lambda e: contextlib.nullcontext()",
    "torch.sigmoid = lambda x: x * 0\ntorch.relu = None",
    "%%writefile graphviz.py\nraise ImportError('the notebook wrote this module')",
]
# 01: each exercise cheated a way the previous judge let through (issue 36), its line named.
CHEATS_01 = {
    "relu_grad": ("def relu_grad(x):\n    return (torch or 0).ops.aten.threshold_backward(torch.ones_like(x), x, 0)",
                  r"line 2 .* cannot be read"),
    "sigmoid_grad": ("def sigmoid_grad(x):\n    y = torch.sigmoid(x.detach().requires_grad_())\n"
                     "    return y.grad_fn(torch.ones_like(y))", r"line 3 .* calls \.grad_fn"),
    "softmax_jacobian": ("def softmax_jacobian(z):\n    match torch:\n        case T:\n"
                         "            return T.autograd.functional.jacobian(lambda v: T.softmax(v, 0), z)",
                         r"line 4 .* \(a match capture\)"),
    "numerical_grad": ("slopes = {'central': torch.func.jacrev}\ndef numerical_grad(f, x, eps=1e-6):\n"
                       "    return slopes['central'](f)(x)", r"line 1 .* reaches torch\.func\.jacrev"),
    "two_layer_backward": ("def two_layer_backward(x, W1, W2):\n    leaves = [t.detach().requires_grad_() for t in "
                           "(x, W1, W2)]\n    loss = ((leaves[2] @ torch.sigmoid(leaves[1] @ leaves[0])) ** 2).sum()\n"
                           "    return [m := torch.autograd][0].grad(loss, leaves)", r"line 4 "),
    "softmax_xent_grad": ("def softmax_xent_grad(z, t):\n    out = torch.log_softmax(z, 1)\n"
                          "    g = torch.zeros_like(z)\n"
                          "    g[torch.arange(len(t)), t] = -1 / len(t)\n"
                          "    return torch._log_softmax_backward_data(g, out, 1, z.dtype)",
                          r"line 5 .* a private part of torch"),
}
REBOUND = ("def mse_by_func(W, x, y):\n    return torch.func.grad(lambda w: ((w @ x - y) ** 2).sum())(W)\n"
           "linear_mse_grad, _ = mse_by_func, None", "linear_mse_grad", r"line 2 .* reaches torch\.func\.grad")
# 09: the maths outside the kernels, through a helper in a dict and through dispatch switched off.
EMPTY_KERNEL = "@triton.jit\ndef nothing(x_ptr):\n    pass\n\n\n"
CHEATS_09 = {
    "silu_forward": ("import numpy as np\n" + EMPTY_KERNEL + "def numpy_silu(x):\n"
                     "    y = np.asarray(x.detach().cpu())\n"
                     "    return y / (1 + np.exp(-y))\n\n\nhelpers = {'silu': numpy_silu}\n\n\ndef silu_forward(x):\n"
                     "    nothing[(1,)](x)\n    out = torch.empty_like(x)\n"
                     "    out.copy_(torch.from_numpy(helpers['silu'](x)))\n    return out",
                     r"uses numpy\.asarray outside a kernel"),
    "rmsnorm_forward": (EMPTY_KERNEL + "def rmsnorm_forward(x, weight, eps=1e-6):\n    nothing[(1,)](x)\n"
                        "    with (torch or 0)._C._DisableTorchDispatch():\n"
                        "        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + eps)\n"
                        "        return (x * rstd[:, None] * weight).to(x.dtype), rstd", r"cannot be read"),
}
HONEST_09 = ANSWERS["09_kernels"]["silu_forward"].replace(
    "    x = x.contiguous()  # the kernel reads flat memory",
    "    x = x.contiguous()  # the kernel reads flat memory\n"
    "    assert x.ravel().numel() == x.nbytes // x.dtype.itemsize\n"
    "    _ = x.swapaxes(0, -1) if x.dim() else x\n    if x.is_cuda:\n        torch.cuda.synchronize()")


def submissions():
    """{(notebook, student): (notebook, {exercise: message pattern} of the exercises that must score 0)}."""
    cheats = {name: answer for name, (answer, _) in CHEATS_01.items()}
    cheated_01 = notebook("01_chain_rule", cheats, top=PATCHES, after=[REBOUND[0]])
    honest_01 = notebook("01_chain_rule", {"relu_grad": "def relu_grad(x):\n    if not isinstance(x, torch.Tensor):\n"
                                                        "        raise TypeError(f'a tensor, not {type(x).__name__}')\n"
                                                        "    return (x > 0).to(x.dtype)"},
                         top=[c for c in OUTSIDE_THE_REACH if "%run" not in c and "settrace" not in c])
    answers_09 = {name: answer for name, (answer, _) in CHEATS_09.items()}
    return {
        ("01_chain_rule", "cheats"): (cheated_01, {**{n: says for n, (_, says) in CHEATS_01.items()},
                                                   REBOUND[1]: REBOUND[2]}),
        ("01_chain_rule", "honest"): (honest_01, {}),
        ("09_kernels", "cheats"): (trimmed("09_kernels", answers_09), {
            **{n: says for n, (_, says) in CHEATS_09.items()}, "TritonSiLU": r"uses numpy\.asarray outside",
            "TritonRMSNorm": r"cannot be read"}),
        ("09_kernels", "honest"): (trimmed("09_kernels", {"silu_forward": HONEST_09}), {}),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One class, graded in trusted then in plain mode: {mode: scores.csv's rows}."""
    root = tmp_path_factory.mktemp("by-hand")
    names = ["01_chain_rule", "09_kernels"]
    shutil.copy(course.ROOT / "nbgrader_config.py", root)
    for name in names:
        shutil.copytree(course.SOLUTIONS / name, root / "solutions" / name)
    run = classgrade.nbgrader_runner(root)
    classgrade.ensure_in_gradebook(root, names, run)
    for (name, student), (nb, _) in submissions().items():
        folder = root / "submitted" / student / name
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{name}.ipynb")
    rows = {}
    for mode in ("trusted", "plain"):
        result = classgrade.grade_class(root, names, workers=2, limits=Limits(cell_seconds=CELL_SECONDS),
                                        progress=False, run=run, plain=mode == "plain")
        assert result.not_graded() == [], [o.reason for o in result.not_graded()]
        rows[mode] = classgrade.scores(root, names)
    return rows


@SANDBOXED
@pytest.mark.parametrize("mode", ["trusted", "plain"])
def test_each_cheat_scores_0_on_the_exercise_it_cheats_with_its_line(graded, mode):
    for (name, student), (_, cheated) in submissions().items():
        mine = {r["exercise"]: r for r in graded[mode] if r["student"] == student and r["notebook"] == name}
        for exercise, row in mine.items():
            graded_name = course.graded_name(exercise)
            if graded_name in cheated:
                assert row["score"] == 0, (mode, name, exercise, row)
                assert row["message"].startswith(f"ByHandRule: {graded_name}: cell "), (mode, exercise, row)
                assert re.search(cheated[graded_name], row["message"]), (mode, exercise, row["message"])
            else:
                assert row["score"] == row["max_score"], (mode, name, student, exercise, row)


@SANDBOXED
@pytest.mark.parametrize("mode", ["trusted", "plain"])
def test_honest_code_keeps_full_marks_and_patches_outside_the_answers_change_nothing(graded, mode):
    """The honest students' notebooks hold every honest form the previous judge refused; the cheating one holds
    patches of the guards, of torch and a module it writes, each of which would change a verdict had it run
    before the by-hand grade cells: its exercises lose only what their own answers cheat."""
    for (name, student), (_, cheated) in submissions().items():
        if cheated:
            continue
        mine = [r for r in graded[mode] if r["student"] == student and r["notebook"] == name]
        assert mine and all(r["score"] == r["max_score"] for r in mine), (mode, name, mine)
