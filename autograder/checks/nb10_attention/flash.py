"""`flash_forward(q, k, v, scale, causal)` -> (o, lse) and `flash_backward(q, k, v, o, lse, do, scale, causal)` ->
(dq, dk, dv), the learner's Triton kernels, under notebook 09's rules (`autograder.checks.kernel_guard`): inputs
and allocations in marked memory, launches counted, no torch maths outside a kernel, loads and stores watched.

References are PyTorch's in float64: `F.scaled_dot_product_attention` and the log-sum-exp of the scores for the
forward, autograd through it for the backward. Where the values are wrong, the slips of the torch versions are
looked for (`online.slips`, `backward.slips`), then two that only a kernel makes, told apart by behaviour: the
accumulator not rescaled (right when every row's largest score is its first key's, wrong when it is its last
key's) and key lanes past M scored 0 instead of −∞ (right when M is a multiple of every block, 64, wrong at 63).
A kernel that allocates a tensor of N×M elements or more per head stores what it should recompute (`P`).
`FlashAttention` is run as autograd runs it (`kernel_functions.run_function`), and may save only q, k, v, o, lse.
"""
import contextlib
import functools

import torch

from autograder import checks
from autograder.checks import GradingError, battery, kernel_layouts
from autograder.checks.compare import fail
from autograder.checks.function_class import check_function_class
from autograder.checks.kernel_functions import FunctionRun, run_function
from autograder.checks.kernel_verdicts import call_guarded, check_rules, check_tensor
from autograder.checks.nb10_attention import backward, online, verdicts
from autograder.checks.nb10_attention import cases as attention_cases

FORWARD_NAMES, BACKWARD_NAMES = ("o", "lse"), ("dq", "dk", "dv")
GRADCHECK_ELEMENTS = 16  # gradcheck perturbs every element of q, k and v, each a guarded run of the interpreter
FORWARD_LAUNCHES = "one launch computes every block of queries of every head: a grid of (B·H, cdiv(N, BLOCK))"
BACKWARD_LAUNCHES = ("at most three launches: D = rowsum(dO ∘ O), then dK and dV per block of keys, then dQ (by a "
                     "second pass, or by atomics in the same one)")


def _layouts(case, names):
    """Every 4-D input of the case in its layout (heads transposed from (B, N, H, d), or each its own), lse as it
    comes."""
    own = {"heads-transposed": dict.fromkeys(names, "heads-transposed"),
           "each-its-own": attention_cases.EACH_ITS_OWN}.get(case["layout"], {})
    return {name: own[name] for name in names if name in own and isinstance(case.get(name), torch.Tensor)
            and case[name].dim() == 4}


def _run(exercise, fn, case, names, launches, why):
    """The learner's `fn` on the case's `names`, in the guard; the rules of a kernel checked."""
    inputs = {name: case[name] for name in names}
    run = call_guarded(exercise, fn, inputs, _layouts(case, names))
    shown = attention_cases.shown(case)
    check_rules(exercise, run, shown, launches=launches, why=why)
    _check_inside(exercise, run, shown)
    _check_no_stored_scores(exercise, run, case, shown)
    return run


def _check_inside(exercise, run, shown):
    """Every lane a load or store of the kernels reached lies inside a tensor of its launch (masked-off lanes
    aside), whether or not what a stray load read reaches the result."""
    if run.outside_access:
        fail(exercise, f"{run.outside_access}: every load and store is masked along each axis it can run past "
                       "(queries past N, keys past M, the head's width past d), so that no lane reaches memory "
                       "that is not the tensor's. Here that memory is padding the checks put there; on a GPU it is "
                       "another tensor's data or an illegal address, even where what the lane reads never reaches "
                       "your result", shown)


def stored_scores_limit(case) -> int:
    """B·H·N·M where that many elements are more than four times any tensor the kernels need (inputs, outputs,
    per-block partial sums), else 0: the check applies to such a case only."""
    (b, h, n, d), m = case["q"].shape, case["k"].shape[-2]
    return b * h * n * m if n * m > 4 * max(n, m) * max(d, 16) else 0


def _check_no_stored_scores(exercise, run, case, shown):
    limit = stored_scores_limit(case)
    if limit and run.largest_allocation is not None and run.largest_allocation[0] >= limit:
        elements, shape = run.largest_allocation
        n, m = case["q"].shape[-2], case["k"].shape[-2]
        fail(exercise, f"stores P: allocated a tensor of shape {tuple(shape)} ({elements:,} elements), as many as "
                       f"every score of N×M = {n}×{m} per head. A fused kernel never stores P: it keeps q, k, v, o "
                       "and lse and recomputes P one block at a time", shown)


def _check_outputs(exercise, run, case, expected, names, allowed, hint):
    """Form, then each returned tensor (never written, NaN, values) as notebook 09 checks a kernel's output;
    a wrong value starts with the slip `hint()` names, where one explains it."""
    shown = attention_cases.shown(case)
    got = run.result
    verdicts.check_form(exercise, got, expected, names, shown, allowed_dtypes=allowed)
    for i, (name, g, e) in enumerate(zip(names, got, expected)):
        e = e.to(g.dtype)
        try:
            check_tensor(exercise, run, i, g, e, shown, name, close=verdicts.tolerance(e))
        except GradingError as err:
            found = hint()
            if not found:
                raise
            raise GradingError(f"{exercise}: {found}\n{err}") from None  # the slip first: a long message is cut


def layout_slip(got, expected, case, names) -> str:
    """The output of `got` (tensors named `names`, `expected` their values) whose values are `expected` written at
    contiguous offsets into a tensor laid out like one of the case's inputs (what torch.empty_like of a transposed
    input, stored at row · d + col, returns), said; "" where none is."""
    laid = _layouts(case, ("q", "k", "v", "o", "do"))
    for out, g, e in zip(names, got, expected):
        for source, layout in laid.items():
            if not isinstance(g, torch.Tensor) or case[source].shape != e.shape or layout not in PERMUTED:
                continue
            stride = kernel_layouts.strides(case[source], layout)
            scrambled = e.detach().double().contiguous().flatten().as_strided(e.shape, stride)
            if verdicts.matches(g, scrambled) and not verdicts.matches(g, e.detach().double()):
                return (f"{out} {WRONG_PLACES}: written at contiguous offsets (row · d + col), "
                        f"into a tensor laid out like {source} ({layout}, strides {stride}). torch.empty_like"
                        f"({source}) keeps {source}'s strides; allocate {out} contiguous (torch.empty(shape, "
                        f"dtype=..., device=...)), or pass {out}.stride() to the kernel and store through them")
    return ""


PERMUTED = ("heads-transposed", "transposed")  # the layouts torch.empty_like keeps (dense, permuted strides)
WRONG_PLACES = "holds its values at the wrong places"


@contextlib.contextmanager
def _stressed(exercise, stress, what):
    """`battery.stressed`, except that a layout slip of an output (`layout_slip`) is said as the reason the stressed
    inputs broke the answer, instead of the battery's advice on reading them."""
    with battery.stressed(exercise, stress, what=what):
        try:
            yield
        except GradingError as err:
            first, _, rest = str(err).partition("\n")
            if stress is None or WRONG_PLACES not in first:
                raise
            slip = first.split(": ", 1)[1]
            raise GradingError(f"{exercise}: fails for {battery.describe(stress, what)}: {slip}\n{rest}") from None


def _right_on(exercise, fn, case, reference, names, launches, why) -> bool:
    """Whether the kernel is right on `case`; one that fails there in any way is not."""
    try:
        run = _run(exercise, fn, case, names, launches, why)
    except GradingError:
        return False
    got = run.result
    return (isinstance(got, (tuple, list)) and len(got) == len(reference)
            and all(verdicts.matches(g, r) for g, r in zip(got, reference)))


def behaviour_cases(case, seed=11):
    """Pairs of cases (right-looking, revealing) of the case's dtype: a row's largest score at its first key, then
    at its last (a kernel that never rescales is right only on the first); 64 keys, then 63 (a kernel that
    scores key lanes past M as 0 is right only on the first, whatever its block up to 64)."""
    d, dtype = case["q"].shape[-1], case["q"].dtype
    spread = attention_cases.online_case(1, 1, 16, d, seed=seed, block=1, M=64, dtype=dtype)
    first, last = online.rescale_cases(spread)
    tail = attention_cases.online_case(1, 1, 16, d, seed=seed + 1, block=64, M=64, dtype=dtype)
    short = attention_cases.online_case(1, 1, 16, d, seed=seed + 2, block=64, M=63, dtype=dtype)
    return [("rescale", first, last), ("tail", tail, short)]


BEHAVIOURS = {
    "rescale": ("right when every row's largest score is its first key's, wrong when it comes with a later block of "
                "keys: the accumulator is not rescaled. When a block raises the running max from m_old to m_new, "
                "the output accumulated so far (and the running sum) must be multiplied by exp(m_old − m_new)"),
    "tail": ("right with 64 keys, wrong with 63: the key lanes past M score 0 instead of −∞. A masked-off lane "
             "loads other=0.0, so its score is 0, and exp(0 − m) still counts in the sum; set masked scores to −∞ "
             "(tl.where(keys < M, s, float('-inf'))) before the max")}


def _forward_reference(case):
    o, lse = online.reference_online_attention(case)
    return [o.to(case["q"].dtype), lse.to(case["q"].dtype)]


def _forward_slip(exercise, fn, got, case):
    reference = online.reference_online_attention(case)
    found = layout_slip(got, reference, case, FORWARD_NAMES) or online.slip_in(got, case, reference)
    if found:
        return found
    for what, right_looking, revealing in behaviour_cases(case):
        check = functools.partial(_right_on, exercise, fn, names=("q", "k", "v", "scale", "causal"),
                                  launches=(1, 1), why=FORWARD_LAUNCHES)
        if (check(right_looking, _forward_reference(right_looking))
                and not check(revealing, _forward_reference(revealing))):
            return BEHAVIOURS[what]
    return ""


def check_flash_forward(exercise, fn, cases, stress=None, what="q, k and v"):
    """`fn(q, k, v, scale, causal)` -> (o, lse) by one launch of the learner's kernel, against PyTorch on every
    case; `stress` names the battery's stress the cases were built with."""
    names = ("q", "k", "v", "scale", "causal")
    with _stressed(exercise, stress, what):
        for case in cases:
            with verdicts.far_below_zero(exercise, case):
                run = _run(exercise, fn, case, names, (1, 1), FORWARD_LAUNCHES)
                expected = _forward_reference(case)
                allowed = {1: tuple(dict.fromkeys((torch.float32, case["q"].dtype)))}
                _check_outputs(exercise, run, case, expected, FORWARD_NAMES, allowed,
                               hint=lambda: _forward_slip(exercise, fn, run.result, case))


def backward_inputs(case) -> dict:
    """The case with what the forward hands the backward: o (PyTorch's) and lse (float32, or float64 for a float64
    case), both from float64."""
    o, lse = online.reference_online_attention(case)
    wide = case["q"].dtype == torch.float64
    return {**case, "o": o.to(case["q"].dtype), "lse": lse.to(torch.float64 if wide else torch.float32)}


def _recomputed(case, diagonal):
    """(dq, dk, dv) in float64 of a backward that rebuilds P from the given lse under a causal mask shifted by
    `diagonal`: what a kernel with the mask off by one returns (its P no longer sums to one)."""
    q, k, v, o, do = (case[n].double() for n in ("q", "k", "v", "o", "do"))
    scale = case["scale"]
    p = torch.exp(q @ k.mT * scale - case["lse"].double()[..., None])
    p = p.masked_fill(~attention_cases.visible(case, diagonal), 0.0)
    ds = p * (do @ v.mT - (do * o).sum(-1, keepdim=True))
    return ds @ k * scale, ds.mT @ q * scale, p.mT @ do


def _backward_slip(got, case, reference):
    found = layout_slip(got, reference, case, BACKWARD_NAMES) or backward.slip_in(got, case, reference)
    if found or not case["causal"]:
        return found
    for diagonal, sees in ((1, "j ≤ i + 1"), (-1, "j < i")):
        if any(verdicts.matches(g, s) and not verdicts.matches(g, r)
               for g, s, r in zip(got, _recomputed(case, diagonal), reference)):
            return (f"the causal mask is off by one: query i sees keys j ≤ i (its own key included), not {sees}; "
                    "both passes rebuild P with the forward's mask")
    return ""


def check_flash_backward(exercise, fn, cases, stress=None, what="q, k and v"):
    """`fn(q, k, v, o, lse, do, scale, causal)` -> (dq, dk, dv) by the learner's kernels (at most three launches)
    against autograd in float64 on every case."""
    names = ("q", "k", "v", "o", "lse", "do", "scale", "causal")
    with _stressed(exercise, stress, what):
        for case in cases:
            case = backward_inputs(case)
            run = _run(exercise, fn, case, names, (1, 3), BACKWARD_LAUNCHES)
            reference = backward.reference_attention_backward(case)
            _check_outputs(exercise, run, case, [r.to(case["q"].dtype) for r in reference], BACKWARD_NAMES, None,
                           hint=lambda: _backward_slip(run.result, case, reference))


def _saved_shapes_problem(saved, case) -> str:
    """What is wrong with the tensors FlashAttention saved for its backward ("" when they are q, k, v, o and lse)."""
    (b, h, n, d), m = case["q"].shape, case["k"].shape[-2]
    wanted = sorted([(b, h, n, d), (b, h, m, d), (b, h, m, d), (b, h, n, d), (b, h, n)])
    shapes = sorted(tuple(t.shape) for t in saved or [])
    if shapes == wanted:
        return ""
    return (f"saved {len(shapes)} tensors of shapes {shapes} for the backward: FlashAttention saves only q, k, v, o "
            f"and lse ({wanted}), and its backward recomputes P from them (ctx.save_for_backward(q, k, v, o, lse))")


def check_flash_attention(exercise, cls, cases, stress=None, what="q, k and v"):
    """`cls.apply(q, k, v, scale, causal)`: the output and the gradients of q, k and v against autograd through
    PyTorch's attention in float64, kernels launched in each pass, only q, k, v, o and lse saved, and gradcheck
    on float64 cases of at most GRADCHECK_ELEMENTS elements in q; `stress` and `what` as the other checks'."""
    check_function_class(exercise, cls)
    with _stressed(exercise, stress, what):
        for case in cases:
            with verdicts.far_below_zero(exercise, case):
                _check_flash_attention_case(exercise, cls, case)


def _check_flash_attention_case(exercise, cls, case):
    names = ("q", "k", "v", "scale", "causal")
    shown = attention_cases.shown(case)
    small = case["q"].dtype == torch.float64 and case["q"].numel() <= GRADCHECK_ELEMENTS
    layouts = _layouts(case, ("q", "k", "v", "do"))
    layouts = {"grad_out" if n == "do" else n: layout for n, layout in layouts.items()}
    driver = functools.partial(run_function, cls, names=names, differentiable=("q", "k", "v"), layouts=layouts,
                               gradcheck=small)
    run = checks.call_student(exercise, driver, case["do"], *(case[n] for n in names), names=["do", *names])
    if not isinstance(run, FunctionRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if not run.own_node:
        fail(exercise, "the output's grad_fn is not FlashAttention's backward: return o itself from forward and "
                       "call the class through FlashAttention.apply(q, k, v, scale, causal)", shown)
    if run.forward_launches < 1:
        fail(exercise, "FlashAttention.apply launched no Triton kernel: forward calls your flash_forward", shown)
    if run.wrote_outside:
        fail(exercise, f"a kernel wrote outside {run.wrote_outside[0]} (a store without a mask)", shown)
    problem = _saved_shapes_problem(run.saved, case)
    if problem:
        fail(exercise, problem, shown)
    o = _forward_reference(case)[0]
    checks.expect_close(exercise, run.out, o, inputs=shown, names=["FlashAttention.apply(q, k, v, scale, causal)"],
                        **verdicts.tolerance(o))
    if run.backward_launches < 1:
        fail(exercise, "the backward of FlashAttention launched no Triton kernel: it calls your flash_backward "
                       "with the q, k, v, o and lse that forward saved", shown)
    grads = run.grads if isinstance(run.grads, (list, tuple)) and len(run.grads) == 3 else [None] * 3
    for got, expected, name in zip(grads, backward.reference_attention_backward(case), BACKWARD_NAMES):
        if got is None:
            fail(exercise, f"{name} is None: backward returns (dq, dk, dv, None, None), one value per input of "
                           "forward (None for scale and causal)", shown)
        expected = expected.to(case["q"].dtype)
        try:
            checks.expect_close(exercise, got, expected, inputs=shown, names=[name], **verdicts.tolerance(expected))
        except GradingError as err:
            found = layout_slip([got], [expected], case, [name])
            if not found:
                raise
            raise GradingError(f"{exercise}: {found}\n{err}") from None
    if run.verdict is not None:
        error, first_line = run.verdict
        fail(exercise, f"gradcheck failed: {error}: {first_line}", shown)
