"""Notebook 10's checks on their own: the inputs they build and the watch that refuses an N×M tensor.

The verdicts on answers (each slip named, right answers passed) are tests/test_mutants.py's, through the
catalogue; these hold what those rely on.
"""
import torch

from autograder.checks.nb10_attention import cases, online
from autograder.checks.op_watch import OpWatch


def test_the_watch_records_the_output_with_the_most_elements_and_its_op():
    a, b = torch.randn(6, 2), torch.randn(2, 5)
    with OpWatch() as watch:
        (a @ b).sum()
        a.expand(3, 6, 2)  # a view shows 36 elements without storage of its own: it counts as 36
    assert watch.most_elements == (36, (3, 6, 2), "aten::expand")


def test_heads_transposed_keeps_the_values_in_a_layout_of_its_own():
    case = cases.backward_case(2, 3, 5, 4, seed=1, layout="heads-transposed")
    q = cases.laid_out(case)[0]
    assert torch.equal(q, case["q"]) and not q.is_contiguous()
    assert q.transpose(1, 2).is_contiguous()  # stored as (B, N, H, d)


def test_large_logits_reach_the_size_the_battery_names():
    q, k, _ = cases.qkv(2, 2, 12, 8, seed=3, dtype=torch.float32, large_logits=True)
    largest = ((q.double() @ k.double().mT) * 8 ** -0.5).abs().max().item()
    assert abs(largest - cases.LARGE_LOGIT) < 1e-3 * cases.LARGE_LOGIT
    assert torch.exp(torch.tensor(largest, dtype=torch.float32)).isinf()


def test_the_allocation_watch_applies_only_where_n_by_m_is_more_than_the_answer_needs():
    assert online.watched_size(cases.online_case(1, 2, 80, 8, seed=1, block=16)) == 80 * 80
    assert online.watched_size(cases.online_case(2, 3, 7, 5, seed=1, block=3)) == 0  # the inputs are larger
    assert online.watched_size(cases.online_case(1, 1, 1, 4, seed=1, block=4)) == 0


def test_the_rescale_cases_put_every_rows_largest_score_in_the_first_then_the_last_tile():
    case = cases.online_case(2, 2, 9, 5, seed=4, block=4, causal=True)
    first, last = online.rescale_cases(case)
    for built, tile in ((first, 0), (last, -1)):
        assert not built["causal"] and built["k"].shape[-2] % built["block"] == 0
        scores = built["q"] @ built["k"].mT
        tiles = scores.split(built["block"], dim=-1)
        assert (tiles[tile].amax(-1) > torch.cat([t for i, t in enumerate(tiles) if t is not tiles[tile]], -1)
                .amax(-1)).all()


# --- the notebook's statements and figures, held to what they say ---------------------------------------------
import ast  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402

import course  # noqa: E402
import pytest  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from autograder.learner import triton_setup  # noqa: E402

NOTEBOOK = "10_attention"
TRITON = triton_setup.prepare()
# each exercise's example: the inputs it must name (o and lse come from the forward), the outputs it states
EXAMPLES = {"attention_backward": ({"q", "k", "v", "do", "scale", "causal"}, ("dq", "dk", "dv")),
            "online_attention": ({"q", "k", "v", "scale", "causal", "block"}, ("o", "lse")),
            "flash_forward": ({"q", "k", "v", "scale", "causal"}, ("o", "lse")),
            "flash_backward": ({"q", "k", "v", "do", "scale", "causal"}, ("dq", "dk", "dv"))}


def cells():
    return course.read(course.solution_path(NOTEBOOK)).cells


def statement(name) -> str:
    heading = f"### Exercise: `{name}`"
    (text,) = [c.source for c in cells() if c.cell_type == "markdown" and c.source.startswith(heading)]
    return text


def example(name) -> tuple:
    """({input: value}, {output: value}) of the statement's "Example:", read from its backticked `a = b = value` and
    `name ≈ value` (tensors as nested lists, float64)."""
    text = statement(name).split("Example:", 1)[1]
    given, stated = {}, {}
    for span in re.findall(r"`([^`]+)`", text):
        target = stated if "≈" in span else given
        *names, value = [part.strip() for part in re.split("≈|=", span)]
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            continue  # a name in backticks (`flash_forward`), not a value
        for n in names:
            target[n] = torch.tensor(value, dtype=torch.float64) if isinstance(value, list) else value
    return given, stated


def reference(name, given) -> dict:
    """What PyTorch says the example's outputs are: F.scaled_dot_product_attention, logsumexp, autograd."""
    q, k, v = (given[n].clone().requires_grad_() for n in ("q", "k", "v"))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=given["causal"], scale=given["scale"])
    if name in ("online_attention", "flash_forward"):
        scores = (q @ k.mT * given["scale"]).detach()
        if given["causal"]:
            scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
        return {"o": o.detach(), "lse": torch.logsumexp(scores, -1)}
    return dict(zip(("dq", "dk", "dv"), torch.autograd.grad(o, (q, k, v), given["do"])))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_in_the_statements_is_one_the_api_allows_and_what_autograd_says(name):
    inputs, outputs = EXAMPLES[name]
    given, stated = example(name)
    assert set(given) == inputs and set(stated) == set(outputs), (given, stated)
    q, k, v = given["q"], given["k"], given["v"]
    assert q.dim() == 4 and k.shape == v.shape and k.shape[:2] == q.shape[:2], "q (B, H, N, d); k and v (B, H, M, d)"
    assert q.shape[-1] == k.shape[-1] == v.shape[-1], "the graded API has one head width d for q, k and v"
    assert "do" not in given or given["do"].shape == q.shape
    expected = reference(name, given)
    for out in outputs:
        assert torch.allclose(stated[out], expected[out], atol=1e-4, rtol=0), (out, stated[out], expected[out])


@pytest.fixture(scope="module")
def solutions():
    import mutation
    return mutation.solution_namespace(NOTEBOOK)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_reference_solution_gives_each_example_and_reads_nothing_outside_its_inputs(name, solutions):
    """The reference on its statement's example: the stated values, and for a kernel, under the guard, not one lane of
    a load or a store outside a tensor (an unmasked read past v would pass every value check)."""
    given, stated = example(name)
    expected = reference(name, given)
    args = {n: given[n] for n in ("q", "k", "v")}
    if name in ("attention_backward", "flash_backward"):
        forward = reference("online_attention", given)
        args.update(o=forward["o"], lse=forward["lse"], do=given["do"])
    if name == "attention_backward":
        del args["lse"]
    args.update(scale=given["scale"], causal=given["causal"])
    if name == "online_attention":
        args["block"] = given["block"]
    if not name.startswith("flash"):
        got = solutions[name](*args.values())
    else:
        if not TRITON.usable:
            pytest.skip(TRITON.message)
        from autograder.checks.kernel_layouts import run_laid_out
        run = run_laid_out(solutions[name], *args.values(), names=tuple(args), layouts={})
        assert run.outside_access is None and run.wrote_outside == [] and run.changed == [], run
        got = run.result
    for out, value in zip(EXAMPLES[name][1], got):
        assert torch.allclose(value.double(), expected[out], atol=1e-9), (out, value, expected[out])
        assert torch.allclose(stated[out], value.double(), atol=1e-4, rtol=0)


NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def test_the_introduction_states_the_exercises_and_points_the_grade_cells_give():
    intro = cells()[0].source
    table = dict(re.findall(r"^\| `(\w+)[(`].*\| (\d+) \|$", intro, re.M))
    points = {}
    for cell in cells():
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("grade"):
            name = course.graded_name(grading["grade_id"])
            points[name] = points.get(name, 0) + grading["points"]
    assert {n: int(p) for n, p in table.items()} == points
    (count, total), = re.findall(r"graded, (\w+) exercises, (\d+) points in all", intro)
    assert (NUMBERS[count], int(total)) == (len(points), sum(points.values()))
    sections = re.findall(r"^## (\d+)\. ", "\n".join(c.source for c in cells() if c.cell_type == "markdown"), re.M)
    outline = re.findall(r"^(\d+)\. ", intro, re.M)
    assert outline == sections, "the outline names every numbered section, in order"


TRITON_CALLS = {"flash_forward", "flash_backward", "tiled_matmul"}


def launches_outside_a_triton_guard(source) -> list:
    """Calls of the notebook's kernels (or FlashAttention.apply) at the top level of a cell, not under `if
    TRITON.usable:` or `if COMPILED:` (a function's body runs only when called)."""
    found = []

    def visit(node, guarded):
        if isinstance(node, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
            return
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TRITON.usable", "COMPILED"):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, guarded)
            return
        if isinstance(node, ast.Call) and not guarded:
            called = ast.unparse(node.func)
            if called in TRITON_CALLS or called == "FlashAttention.apply" or isinstance(node.func, ast.Subscript):
                found.append(called)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(source), False)
    return found


def test_without_triton_no_cell_outside_the_grade_cells_launches_a_kernel():
    """As in 09: where Triton is missing (macOS, Windows) the notebook runs on, each kernel cell saying why it did not
    launch, and only the grade cells fail, with require_triton's message."""
    stray = {}
    for i, cell in enumerate(cells()):
        grading = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and not grading.get("grade") and not grading.get("solution"):
            if launches_outside_a_triton_guard(cell.source):
                stray[i] = launches_outside_a_triton_guard(cell.source)
    assert stray == {}
    assert launches_outside_a_triton_guard("flash_forward(q)\nif TRITON.usable:\n    tiled_matmul(a, b)") == \
        ["flash_forward"]


# --- the guard's address watch ---------------------------------------------------------------------------------
needs_triton = pytest.mark.needs(TRITON.usable, reason=TRITON.message)


@needs_triton
def test_a_load_past_an_input_is_named_even_when_what_it_read_never_reaches_the_result():
    import triton
    import triton.language as tl

    from autograder.checks import kernel_guard

    @triton.jit
    def _triple(x_ptr, y_ptr, n, MASK_LOAD: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        if MASK_LOAD:
            x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        else:
            x = tl.load(x_ptr + offsets)  # the lanes past n read past x; the store's mask drops them
        tl.store(y_ptr + offsets, 3 * x, mask=offsets < n)

    def triple(x, mask_load):
        y = torch.empty_like(x)
        _triple[(1,)](x, y, x.numel(), MASK_LOAD=mask_load, BLOCK=128)
        return y

    x = torch.randn(100)
    stray = kernel_guard.run_guarded(lambda x: triple(x, False), x, names=("x",))
    assert torch.equal(stray.result, 3 * x) and stray.wrote_outside == []
    assert stray.outside_access == "your kernel _triple read outside x (1 element past its last element)"
    assert kernel_guard.run_guarded(lambda x: triple(x, True), x, names=("x",)).outside_access is None
