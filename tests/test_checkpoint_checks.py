"""autograder.checks.nb06_checkpointing: the independent counts agree with the hooks, PyTorch's own
checkpointing passes every check, and the failures say what is wrong."""
import ast
import math
from unittest import mock

import mutation
import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as torch_checkpoint

from autograder.checks import GradingError, boundary
from autograder.checks import nb06_checkpointing as cc
from autograder.checks.nb06_checkpointing import sequential
from autograder.checks.nb06_checkpointing.blocks import TestBlock
from autograder.checks.nb06_checkpointing.saved_bytes import describe_saved, storage_bytes
from autograder.checks.nb06_checkpointing.sequential import make_chain, reference_sequential, run_sequential
from autograder.checks.saved_counts import SavedCounts
from autograder.grader.keys import answer_key
from autograder.learner import memory
from autograder.learner.device import available_devices
from autograder.learner.memory import SavedTensorLedger

KEY = answer_key("06_checkpointing")


def graph_saved_bytes(outputs):
    """The answer key's count without hooks: the distinct storages its graph walk finds."""
    return storage_bytes(t for _, _, t in KEY.graph_saved_tensors(outputs))
PEAKS_16 = [16, 9, 8, 7, 8, 11, 10, 9, 16, 16, 16, 16, 16, 16, 16, 16]  # what the visible test states


@pytest.fixture(params=available_devices())
def device(request):
    return torch.device(request.param)


def leaf(*shape, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype).requires_grad_()


def torch_reentrant(fn, *args):
    return torch_checkpoint.checkpoint(fn, *args, use_reentrant=True)


def torch_non_reentrant(fn, *args):
    return torch_checkpoint.checkpoint(fn, *args, use_reentrant=False)


# --- the graph walk against the hooks ----------------------------------------------------------------
FUNCTIONS = {
    "tanh(x @ w)": lambda x, w: torch.tanh(x @ w),
    "x * x": lambda x, w: x * x,
    "expanded view": lambda x, w: x[:1].expand(50, x.shape[1]) * torch.ones(50, x.shape[1], dtype=x.dtype,
                                                                           device=x.device, requires_grad=True),
    "two views of one storage": lambda x, w: (lambda z: z[:, :2] * z[:, 2:])(x @ w),
    "layer_norm, gelu, softmax": lambda x, w: F.gelu(F.layer_norm(x, (x.shape[1],))).softmax(-1) @ w,
    "cross_entropy": lambda x, w: F.cross_entropy(x @ w, torch.zeros(x.shape[0], dtype=torch.long, device=x.device)),
    "sdpa": lambda x, w: F.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_graph_walk_counts_what_the_hooks_see(name, dtype, device):
    x, w = leaf(6, 4, dtype=dtype, device=device, seed=1), leaf(4, 4, dtype=dtype, device=device, seed=2)
    with SavedTensorLedger() as ledger:
        out = FUNCTIONS[name](x, w)
    assert graph_saved_bytes(out) == ledger.total_bytes > 0


def test_graph_walk_reads_custom_functions_and_tuples():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            return 2 * ctx.saved_tensors[0] * g

    x = leaf(5, dtype=torch.float64)
    outs = (Square.apply(x), x.exp())
    assert graph_saved_bytes(outs) == 40 + 40  # x once, exp's output once


def test_graph_walk_includes_python_numbers_that_hooks_never_see():
    """The documented difference: `x * 2.0` saves a 0-d double that pack hooks are not shown."""
    x = leaf(3)
    with SavedTensorLedger() as ledger:
        out = (x * 2.0).exp()
    assert graph_saved_bytes(out) == ledger.total_bytes + 8


def test_describe_saved_names_each_saved_tensor_once():
    x = leaf(4, 3)
    text = describe_saved(KEY.graph_saved_tensors(x * x))
    assert text.count("MulBackward0") == 2 and "not counted again" in text


# --- saved_bytes: the course's own counters are refused --------------------------------------------
def test_saved_bytes_check_accepts_hooks_and_refuses_the_courses_counters():
    def hooks(fn, *inputs):
        sizes = {}

        def pack(t):
            sizes[(t.device, t.untyped_storage().data_ptr())] = t.untyped_storage().nbytes()
            return t.detach()

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(*inputs)
        return sum(sizes.values())

    def with_ledger(fn, *inputs):
        with SavedTensorLedger() as ledger:
            fn(*inputs)
        return ledger.total_bytes

    x, w = leaf(8, 16, seed=1), leaf(16, 4, seed=2)
    cc.check_saved_bytes("saved_bytes", hooks, lambda a, b: torch.tanh(a @ b), [x, w], "tanh(x @ w)", expected=896)
    for counter in (with_ledger, lambda fn, *a: memory.measure(lambda: fn(*a), "cpu").saved_bytes):
        with pytest.raises(GradingError, match="build that yourself"):
            cc.check_saved_bytes("saved_bytes", counter, lambda a, b: torch.tanh(a @ b), [x, w], "tanh(x @ w)",
                                 graph=KEY.graph_saved_tensors)
    with pytest.raises(GradingError, match="answer key"):  # the key's own walk, called from an answer
        cc.check_saved_bytes("saved_bytes", lambda fn, *a: graph_saved_bytes(fn(*a)), lambda a, b: torch.tanh(a @ b),
                             [x, w], "tanh(x @ w)", graph=KEY.graph_saved_tensors)


def test_no_walk_of_the_graph_is_installed_with_the_checks():
    """The walk that counts without hooks is a correct saved_bytes: the checks take it from the answer key."""
    from autograder.checks.nb06_checkpointing import saved_bytes as module
    assert not hasattr(module, "graph_saved_tensors") and not hasattr(module, "graph_saved_bytes")
    with pytest.raises(ValueError, match="graph="):
        cc.check_saved_bytes("saved_bytes", lambda fn, *a: 0, lambda a: a * a, [leaf(3)], "a * a")


# --- best_segments: judged against the peaks the test gives ---------------------------------------------
@pytest.mark.parametrize("n", [*range(1, 13), 16, 17, 18, 30])
def test_the_key_measures_the_exact_count(n):
    assert KEY.segment_peaks(n) == {k: (k - 1) + n - (k - 1) * (n // k) for k in range(1, n + 1)}


def test_the_stated_table_of_the_visible_test_is_the_measured_one():
    assert list(KEY.segment_peaks(16).values()) == PEAKS_16


def test_best_segments_accepts_every_minimiser_and_explains_a_miss():
    cc.check_best_segments("best_segments", lambda n: {8: 4, 10: 5}[n], KEY.segment_peaks, [8, 10])
    cc.check_best_segments("best_segments", lambda n: {8: 2, 10: 2}[n], KEY.segment_peaks, [8, 10])
    cc.check_best_segments("best_segments", lambda n: 4, {16: PEAKS_16})
    with pytest.raises(GradingError,
                       match=r"best_segments\(8\) returned 3, whose measured peak is 6 .* 2 or 4 segments"):
        cc.check_best_segments("best_segments", lambda n: round(math.sqrt(n)), KEY.segment_peaks, [8])
    with pytest.raises(GradingError, match=r"best_segments\(16\) returned 5, whose measured peak is 8 .* 4 segments"):
        cc.check_best_segments("best_segments", lambda n: 5, {16: PEAKS_16})
    with pytest.raises(GradingError, match="should return an int"):
        cc.check_best_segments("best_segments", lambda n: 2.0, KEY.segment_peaks, [8])
    with pytest.raises(GradingError, match="between 1 and 8"):
        cc.check_best_segments("best_segments", lambda n: 0, KEY.segment_peaks, [8])
    with pytest.raises(GradingError, match="called the course's answer key"):
        cc.check_best_segments("best_segments", lambda n: min(KEY.segment_peaks(n).items(), key=lambda kv: kv[1])[0],
                               KEY.segment_peaks, [8])


# --- checkpoint checks against PyTorch's own checkpoint ---------------------------------------------------
@pytest.mark.parametrize("kind", ["single", "two", "masked", "tuple", "indexed", "argmax"])
@pytest.mark.parametrize("impl", [torch_reentrant, torch_non_reentrant])
def test_torch_checkpoint_passes_the_gradient_check(kind, impl, device):
    cc.check_checkpoint_gradients("checkpoint", impl, kind, width=5, batch=3, seed=1, device=device, forbid=())


@pytest.mark.parametrize("impl", [torch_reentrant, torch_non_reentrant])
def test_torch_checkpoint_passes_memory_and_recompute(impl, device):
    cc.check_checkpoint_memory("checkpoint", impl, width=8, batch=16, seed=2, device=device, forbid=())
    cc.check_checkpoint_recompute("checkpoint", impl, width=6, batch=4, seed=3, device=device, forbid=())


def silent_under_grad(fn, *args):
    """A checkpoint Function that backpropagates into the parameters' .grad whatever called it: right under
    .backward(), None for the parameters under torch.autograd.grad."""
    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return fn(x, *args[1:])

        @staticmethod
        def backward(ctx, grad):
            leaf = ctx.saved_tensors[0].detach().requires_grad_()
            with torch.enable_grad():
                out = fn(leaf, *args[1:])
            torch.autograd.backward(out, grad)
            return leaf.grad

    return Recompute.apply(args[0])


def refuses_without_a_word(fn, *args):
    class Refuses(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return fn(x)

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError()

    return Refuses.apply(*args)


@pytest.mark.parametrize("impl", [torch_reentrant, torch_non_reentrant], ids=["raises", "supports it"])
@pytest.mark.parametrize("kind", ["single", "two", "masked", "tuple"])
def test_autograd_grad_through_checkpoint_must_raise_or_be_right(impl, kind, device):
    """torch's reentrant checkpoint raises under torch.autograd.grad, its non-reentrant one gives the right
    gradients: both pass. A checkpoint that answers None for the parameters does not, nor a bare refusal."""
    cc.check_checkpoint_autograd_grad("checkpoint", impl, kind, width=4, batch=3, seed=60, device=device, forbid=())


def test_autograd_grad_check_names_the_silent_none_and_the_bare_refusal(device):
    with pytest.raises(GradingError, match=r"returned None for parameter fc1\.weight, .* in silence\. Their "
                                           r"gradients went into \.grad instead.*_is_checkpoint_valid"):
        cc.check_checkpoint_autograd_grad("checkpoint", silent_under_grad, "single", width=4, batch=3, seed=61, p=0.0,
                                          device=device, forbid=())
    # the same answer is right under .backward(): only the autograd.grad check tells
    cc.check_checkpoint_gradients("checkpoint", silent_under_grad, "single", width=4, batch=3, seed=61, p=0.0,
                                  device=device, forbid=())
    with pytest.raises(GradingError, match="raised RuntimeError without a message"):
        cc.check_checkpoint_autograd_grad("checkpoint", refuses_without_a_word, "single", width=4, batch=3, seed=62,
                                          p=0.0, device=device, forbid=())


def test_forbidden_catches_torch_checkpoint_however_imported(device):
    from torch.utils.checkpoint import checkpoint as renamed

    for impl in (lambda fn, *a: renamed(fn, *a, use_reentrant=False),
                 lambda fn, *a: torch_checkpoint.CheckpointFunction.apply(fn, True, *a)):
        with pytest.raises(GradingError, match="build that yourself"):
            cc.check_checkpoint_gradients("checkpoint", impl, "single", width=4, batch=2, seed=4, device=device)


def test_gradient_check_names_a_missing_replay(device):
    def no_replay(fn, *args):
        out = torch_checkpoint.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)
        return out

    with pytest.raises(GradingError, match="gradient of input 0 .*random state"):
        cc.check_checkpoint_gradients("checkpoint", no_replay, "single", width=6, batch=5, seed=5, p=0.5,
                                      device=device, forbid=())


def test_memory_check_rejects_a_plain_run(device):
    with pytest.raises(GradingError, match="more than the .* bytes of the block's inputs"):
        cc.check_checkpoint_memory("checkpoint", lambda fn, *a: fn(*a), width=8, batch=16, seed=6, device=device,
                                   forbid=())


def test_recompute_check_counts_calls(device):
    with pytest.raises(GradingError, match="ran once in forward and backward together"):
        cc.check_checkpoint_recompute("checkpoint", lambda fn, *a: fn(*a), width=4, batch=2, seed=7, device=device,
                                      forbid=())


# --- checkpoint_sequential checks -----------------------------------------------------------------------
@pytest.mark.parametrize("n_blocks, segments", [(4, 2), (7, 3), (6, 6), (5, 1), (10, 3)])
def test_torch_checkpoint_sequential_passes(n_blocks, segments, device):
    reentrant = lambda b, k, x: torch_checkpoint.checkpoint_sequential(b, k, x, use_reentrant=True)  # noqa: E731
    non_reentrant = lambda b, k, x: torch_checkpoint.checkpoint_sequential(b, k, x, use_reentrant=False)  # noqa: E731
    for impl in (reentrant, non_reentrant):
        cc.check_sequential_gradients("checkpoint_sequential", impl, n_blocks, segments, seed=8, device=device,
                                      forbid=())
    cc.check_sequential_memory("checkpoint_sequential", reentrant, n_blocks, segments, seed=9, device=device, forbid=())


def stated_counts():
    """The `torch_counts` the visible checkpoint_sequential-segments test states, read from its cell."""
    source = mutation.grade_cell_sources("06_checkpointing")["checkpoint_sequential-segments"]
    visible = ast.parse(source.split("### BEGIN HIDDEN TESTS")[0])
    found = [node.value for node in ast.walk(visible) if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "torch_counts" for t in node.targets)]
    assert len(found) == 1 and isinstance(found[0], ast.Call), "the visible test states torch_counts = dict(...) once"
    return {keyword.arg: ast.literal_eval(keyword.value) for keyword in found[0].keywords}


def test_the_stated_counts_of_the_visible_segments_test_are_torchs():
    """The visible test states torch's counts on the CPU instead of running torch's checkpoint, whose first
    call imports torch._dynamo (seconds): they must be what torch gives for that run."""
    stated = stated_counts()
    blocks, _, x, _ = sequential._sequential_setup(8, 4, width=16, batch=32, seed=50, p=0.0, dtype=torch.float32,
                                                   device="cpu", as_sequential=False)
    _, counts, calls = run_sequential(reference_sequential, blocks, 4, x, 50)
    assert stated == {"calls": calls, "peak_bytes": counts.peak_bytes, "total_bytes": counts.total_bytes}
    cc.check_sequential_memory("s", reentrant_sequential, 8, 4, seed=50, device="cpu", forbid=(), stated=stated)
    with pytest.raises(GradingError, match="blocks 0-3 ran 2x, blocks 4-7 ran 1x"):  # the stated counts decide
        cc.check_sequential_memory("s", reentrant_sequential, 8, 4, seed=50, device="cpu", forbid=(),
                                   stated={**stated, "calls": [2] * 4 + [1] * 4})


def test_segments_out_of_range_must_raise_value_error(device):
    def checked(blocks, segments, x):
        if not 1 <= segments <= len(blocks):
            raise ValueError("segments")
        return reentrant_sequential(blocks, segments, x)

    cc.check_sequential_rejects("s", checked, 5, device=device)
    with pytest.raises(GradingError, match="segments=0, raised ZeroDivisionError; segments must be between 1 and 5"):
        cc.check_sequential_rejects("s", reentrant_sequential, 5, device=device)  # torch's own divides by zero
    with pytest.raises(GradingError, match="segments=6, returned without an error"):
        cc.check_sequential_rejects("s", lambda b, k, x: None if k else checked(b, k, x), 5, device=device)


def test_non_reentrant_checkpoint_hides_its_recomputation_from_the_ledger():
    """Why the reference is reentrant: torch's own hooks nest inside the ledger's and keep what
    is recomputed in backward out of its sight, so the ledger's total misses it."""
    blocks = make_chain(8, 8, seed=10, p=0.0, device="cpu", dtype=torch.float32)
    x = leaf(16, 8, seed=11)
    totals = {}
    for reentrant in (True, False):
        with SavedTensorLedger() as ledger:
            torch_checkpoint.checkpoint_sequential(blocks, 4, x, use_reentrant=reentrant).sum().backward()
        totals[reentrant] = ledger.total_bytes
    assert totals[False] < totals[True]


def test_segment_check_explains_the_convention(device):
    with pytest.raises(GradingError, match=r"blocks 0-5 ran 2x, blocks 6-7 ran 1x .* Yours: blocks 0-7 ran 2x"):
        cc.check_sequential_memory("checkpoint_sequential", all_checkpointed, 8, 4, seed=12, device=device, forbid=())


# --- the estimate and the blocks ------------------------------------------------------------------------
def test_check_number_hints():
    with pytest.raises(GradingError, match="count of values, not of bytes"):
        cc.check_number("e", lambda *a, **k: 3_019_898_880, (8, 2048, 768, 12), {}, 6_039_797_760)
    with pytest.raises(GradingError, match="not gigabytes"):
        cc.check_number("e", lambda *a, **k: 6.03979776, (8, 2048, 768, 12), {}, 6_039_797_760)
    with pytest.raises(GradingError, match="should return a number"):
        cc.check_number("e", lambda *a, **k: "6 GB", (8, 2048, 768, 12), {}, 6_039_797_760)
    cc.check_number("e", lambda *a, **k: 6_039_797_760.0, (8, 2048, 768, 12), {}, 6_039_797_760)


def test_test_blocks_are_seeded_and_count_calls(device):
    a = TestBlock(4, seed=3, device=device, dtype=torch.float64)
    b = TestBlock(4, seed=3, device="cpu", dtype=torch.float32)
    assert torch.allclose(a.fc1.weight.cpu().float(), b.fc1.weight)
    x = leaf(2, 4, dtype=torch.float64, device=device)
    a(x), a(x)
    assert a.calls == 2
    assert isinstance(TestBlock(4, seed=1, kind="tuple", device=device)(x), tuple)


# --- trusted grading: the learner's code runs in a driver, the comparisons here ----------------------------
def run_trusted(source, implementation, kernel=mutation.Loopback):
    """Run a test cell as trusted grading does: the learner's name `g` is a stand-in, reached only
    through `kernel` (mutation's in-process kernel: data-only answers, and a random generator of its
    own, seeded otherwise than the grader's); return the cell's error (None if it passed) and every
    answer that came back."""
    answers = []

    class Recording(kernel):
        def call(self, exercise, fn, args, options):
            answers.append(super().call(exercise, fn, args, options))
            return answers[-1]

    with mock.patch.object(mutation, "Loopback", Recording):
        err = mutation._run_cell(source, "test", {"__name__": "__main__", "g": implementation}, True)
    return err, answers


def flatten(answer):
    if isinstance(answer, (tuple, list)):
        return [leaf for item in answer for leaf in flatten(item)]
    return [answer]


CHECKPOINT_CELL = """
from autograder.checks import nb06_checkpointing
# dropout in the block: both runs are seeded where they happen (the grader's generator is not the kernel's)
nb06_checkpointing.check_checkpoint_gradients("g", g, "single", width=6, batch=5, seed=5, p=0.5, device="cpu",
                                              forbid=())
nb06_checkpointing.check_checkpoint_gradients("g", g, "tuple", width=4, batch=3, seed=6, p=0.5, device="cpu", forbid=())
nb06_checkpointing.check_checkpoint_recompute("g", g, width=6, batch=4, seed=3, device="cpu", forbid=())
nb06_checkpointing.check_checkpoint_memory("g", g, width=8, batch=16, seed=2, device="cpu", forbid=())
nb06_checkpointing.check_checkpoint_autograd_grad("g", g, "two", width=4, batch=3, seed=7, p=0.5, device="cpu",
                                                  forbid=())
"""


def no_replay(fn, *args):
    return torch_checkpoint.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)


@pytest.mark.parametrize("implementation, words", [
    (torch_reentrant, None),
    (torch_non_reentrant, None),
    (no_replay, "random state"),
    (lambda fn, *a: fn(*a), "ran once in forward and backward together"),
], ids=["reentrant", "non-reentrant", "no replay", "plain"])
def test_trusted_checkpoint_checks_seed_both_runs_where_they_happen(implementation, words):
    err, answers = run_trusted(CHECKPOINT_CELL, implementation)
    if words is None:
        assert err is None
        assert not [a for a in flatten(answers) if isinstance(a, (boundary.Opaque, boundary.Raised))]
    else:
        assert isinstance(err, GradingError) and words in str(err), err


SEQUENTIAL_CELL = """
from autograder.checks import nb06_checkpointing
nb06_checkpointing.check_sequential_memory("g", g, 8, 4, seed=12, device="cpu", forbid=())
nb06_checkpointing.check_sequential_gradients("g", g, 7, 3, seed=13, p=0.5, device="cpu", forbid=())
nb06_checkpointing.check_sequential_gradients("g", g, 6, 2, seed=14, device="cpu", as_sequential=True, forbid=())
"""


def reentrant_sequential(blocks, segments, x):
    return torch_checkpoint.checkpoint_sequential(blocks, segments, x, use_reentrant=True)


def all_checkpointed(blocks, segments, x):
    size = len(blocks) // segments
    for s in range(segments):
        part = blocks[s * size:] if s == segments - 1 else blocks[s * size:(s + 1) * size]
        x = torch_checkpoint.checkpoint(lambda t, part=part: torch.nn.Sequential(*part)(t), x, use_reentrant=True)
    return x


def test_trusted_sequential_checks_get_the_saved_bytes_as_numbers():
    err, answers = run_trusted(SEQUENTIAL_CELL, reentrant_sequential)
    assert err is None
    leaves = flatten(answers)
    assert not [a for a in leaves if isinstance(a, (boundary.Opaque, boundary.Raised))]
    counts = [a for a in leaves if isinstance(a, SavedCounts)]
    assert counts and all(isinstance(c.peak_bytes, int) and c.peak_bytes > 0 for c in counts)
    err, _ = run_trusted(SEQUENTIAL_CELL, all_checkpointed)
    assert isinstance(err, GradingError) and "Yours: blocks 0-7 ran 2x" in str(err), err


def test_the_notebook_imports_the_courses_counters_only_after_saved_bytes():
    """Issue 37: the set-up cell handed the learner SavedTensorLedger before the exercise that builds one."""
    import course
    nb = course.read(course.solution_path("06_checkpointing"))
    solution = next(i for i, c in enumerate(nb.cells)
                    if course.nbgrader_meta(c).get("grade_id") == "saved_bytes_solution")
    before = [i for i, c in enumerate(nb.cells[:solution]) if c.cell_type == "code" and "learner.memory" in c.source]
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "learner.memory import" in c.source)
    uses = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
            and ("SavedTensorLedger(" in c.source or "measure(" in c.source)]
    assert before == [] and solution < first <= min(uses), (before, first, uses)
