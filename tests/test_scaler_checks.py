"""autograder.checks.nb05_loss_scaling: correct answers pass, wrong ones fail with a message that names the problem."""
import copy
import math
import sys
from unittest import mock

import mutation
import pytest
import torch
import torch.nn.functional as F

from autograder.checks import GradingError
from autograder.checks.nb05_loss_scaling import GradientStream
from autograder.checks.nb05_loss_scaling import fp16_gradients as fg
from autograder.checks.nb05_loss_scaling import scaler_runs as sr
from autograder.checks.nb05_loss_scaling import underflow as uf
from autograder.grader.keys import answer_key

KEY = answer_key("05_loss_scaling")


# --- small implementations the checks are tried on ---------------------------------------------------
def underflow_ok(t, dtype=torch.float16):
    nonzero = t != 0
    count = int(nonzero.sum())
    return int(((t.to(dtype) == 0) & nonzero).sum()) / count if count else 0.0


def underflow_all_entries(t, dtype=torch.float16):
    return int(((t.to(dtype) == 0) & (t != 0)).sum()) / max(t.numel(), 1)


def grads_ok(model, loss_fn, x, y, scale):
    half = copy.deepcopy(model).half()
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [p.grad.float() / scale for p in half.parameters()]


def grads_ignoring_scale(model, loss_fn, x, y, scale):
    return grads_ok(model, loss_fn, x, y, 1.0)


def grads_not_unscaled(model, loss_fn, x, y, scale):
    return [g * scale for g in grads_ok(model, loss_fn, x, y, scale)]


def grads_in_place(model, loss_fn, x, y, scale):
    model.half()
    (loss_fn(model(x.half()).float(), y) * scale).backward()
    return [p.grad.float() / scale for p in model.parameters()]


def grads_in_fp32(model, loss_fn, x, y, scale):
    twin = copy.deepcopy(model)
    (loss_fn(twin(x), y) * scale).backward()
    return [p.grad / scale for p in twin.parameters()]


class Scaler:
    """A correct dynamic loss scaler."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.s, self.up, self.down, self.every = float(init_scale), growth_factor, backoff_factor, growth_interval
        self.count, self.bad = 0, None

    def scale(self, loss):
        return loss * self.s

    def unscale_(self, optimizer):
        self.bad = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self.bad = self.bad or not bool(torch.isfinite(p.grad).all())
                        p.grad.div_(self.s)

    def step(self, optimizer):
        if self.bad is None:
            self.unscale_(optimizer)
        if self.bad:
            return False
        optimizer.step()
        return True

    def update(self):
        if self.bad:
            self.s, self.count = self.s * self.down, 0
        else:
            self.count += 1
            if self.count == self.every:
                self.s, self.count = self.s * self.up, 0
        self.bad = None

    def get_scale(self):
        return self.s


class GrowsEveryStep(Scaler):
    def update(self):
        self.s *= self.down if self.bad else self.up
        self.bad = None


class UnscalesTwice(Scaler):
    def step(self, optimizer):
        self.unscale_(optimizer)
        return super().step(optimizer)


class StepsOnNaN(Scaler):
    def step(self, optimizer):
        if self.bad is None:
            self.unscale_(optimizer)
        optimizer.step()
        return True


class KernelUser(Scaler):
    def update(self):
        scale, tracker = torch.tensor(self.s), torch.tensor(self.count, dtype=torch.int32)
        torch._amp_update_scale_(scale, tracker, torch.tensor(float(bool(self.bad))), self.up, self.down, self.every)
        self.s, self.count, self.bad = scale.item(), int(tracker), None


class OtherDefault(Scaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=100):
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval)


def message(excinfo):
    return str(excinfo.value)


# --- underflow_fraction ------------------------------------------------------------------------------
def test_smallest_subnormal_of_each_format():
    assert uf.smallest_subnormal(torch.float16) == 2.0 ** -24
    assert uf.smallest_subnormal(torch.bfloat16) == 2.0 ** -133
    assert uf.smallest_subnormal(torch.float32) == 2.0 ** -149


def test_the_key_on_the_exercise_example_the_stated_edges_and_empty_inputs():
    fp16 = torch.float16
    assert KEY.underflow_fraction(torch.tensor([1e-8, -1e-8, 1e-6, 0.0, 1.0]), fp16) == 0.5
    assert KEY.underflow_fraction(torch.zeros(3), fp16) == 0.0
    assert KEY.underflow_fraction(torch.zeros(0), fp16) == 0.0
    # ties at half the smallest subnormal round to even, which is 0
    assert KEY.underflow_fraction(torch.tensor([2.0 ** -25, 2.0 ** -25 * (1 + 2 ** -10)]), fp16) == 0.5
    # the share the visible edge test states: 4 of the 15 non-zero edge values become 0
    assert KEY.underflow_fraction(uf.edge_values(fp16, torch.float32), fp16) == 4 / 15


def test_check_underflow_fraction_takes_a_stated_share_or_a_reference_not_both():
    t = torch.tensor([1e-8, 1.0])
    uf.check_underflow_fraction("u", underflow_ok, t, expected=0.5)
    with pytest.raises(GradingError, match="expected 0.25"):
        uf.check_underflow_fraction("u", underflow_ok, t, expected=0.25)
    for both_or_none in (dict(), dict(expected=0.5, reference=KEY.underflow_fraction)):
        with pytest.raises(TypeError, match="not both"):
            uf.check_underflow_fraction("u", underflow_ok, t, **both_or_none)


def test_an_answer_that_calls_the_key_is_refused():
    with pytest.raises(GradingError, match="called the course's answer key"):
        uf.check_underflow_fraction("u", lambda t, dtype=torch.float16: KEY.underflow_fraction(t, dtype),
                                    torch.tensor([1e-8, 1.0]), expected=0.5)


def test_check_underflow_fraction_accepts_a_correct_answer_on_edges():
    for target, source in [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                           (torch.float32, torch.float64)]:
        uf.check_underflow_fraction("u", underflow_ok, uf.edge_values(target, source), target,
                                    reference=KEY.underflow_fraction)


def test_check_underflow_fraction_explains_a_wrong_denominator():
    with pytest.raises(GradingError) as excinfo:
        uf.check_underflow_fraction("u", underflow_all_entries, torch.tensor([1e-8, 0.0, 0.0, 1.0]),
                                    reference=KEY.underflow_fraction)
    text = message(excinfo)
    assert "expected 0.5" in text and "2 zero (left out)" in text and "1 of the non-zero ones become exactly 0" in text


def test_check_underflow_fraction_wants_a_python_float():
    with pytest.raises(GradingError, match="should return a Python float"):
        uf.check_underflow_fraction("u", lambda t, dtype=None: torch.tensor(0.5), torch.tensor([1e-8, 1.0]),
                                    expected=0.5)


def layout_seen(t, dtype=torch.float16):
    """A correct answer that also records what it was given: (contiguous?, smallest stride)."""
    layout_seen.seen = (t.is_contiguous(), min(t.stride()))
    return underflow_ok(t, dtype)


@pytest.mark.parametrize("layout, seen", [("contiguous", (True, 1)), ("non-contiguous", (False, 2)),
                                          ("expanded", (False, 0))])
def test_a_strided_t_reaches_the_answer_strided(layout, seen):
    """nbgrader's plain call hands the learner a copy, which would be contiguous: the driver makes the view."""
    row = uf.log_uniform(1, 12, seed=4, low=1e-10, high=1e-4, zeros=0.2, device="cpu")
    uf.check_underflow_fraction("u", layout_seen, row, torch.bfloat16, reference=KEY.underflow_fraction, layout=layout)
    assert layout_seen.seen == seen
    with pytest.raises(ValueError, match="layout must be one of"):
        uf.check_underflow_fraction("u", layout_seen, row, expected=0.0, layout="transposed")


def flattens_with_view(t, dtype=torch.float16):
    return underflow_ok(t.view(-1), dtype)


STRIDED_CELL = """
import torch
from autograder.checks import battery
from autograder.checks.nb05_loss_scaling import underflow as uf
from autograder.grader.keys import answer_key
t = uf.log_uniform(6, 9, seed=5, low=1e-10, high=1e-4, zeros=0.2, device="cpu")
with battery.trying("g", "non-contiguous", what="t"):
    uf.check_underflow_fraction("g", g, t, reference=answer_key("05_loss_scaling").underflow_fraction,
                                layout="non-contiguous")
"""


@pytest.mark.parametrize("implementation, words", [(underflow_ok, None),
                                                   (flattens_with_view, "fails for a non-contiguous t: .view")])
def test_trusted_underflow_builds_the_strided_t_in_the_kernel(implementation, words):
    err = run_trusted(STRIDED_CELL, implementation)
    assert (err is None) if words is None else (isinstance(err, GradingError) and words in str(err)), err


def test_log_uniform_is_seeded_and_spread():
    a = uf.log_uniform(1000, seed=3, low=1e-10, high=1e-2, zeros=0.2, device="cpu")
    b = uf.log_uniform(1000, seed=3, low=1e-10, high=1e-2, zeros=0.2, device="cpu")
    assert torch.equal(a, b)
    nonzero = a[a != 0].abs().double()
    assert 0.1 < (a == 0).float().mean().item() < 0.3
    assert nonzero.min() >= 1e-10 * 0.999 and nonzero.max() <= 1e-2 * 1.001 and (a < 0).any()


# --- scaled_fp16_grads -------------------------------------------------------------------------------
@pytest.fixture()
def small_problem():
    model = fg.float32_mlp((6, 16, 8), seed=10, device="cpu")
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(1))
    y = torch.randn(32, 8, generator=torch.Generator().manual_seed(2))
    return model, fg.small_mse(20), x, y


def test_float64_grads_are_float64_autograd(small_problem):
    model, loss_fn, x, y = small_problem
    ref = fg.float64_grads(model, loss_fn, x, y)
    assert all(g.dtype == torch.float64 for g in ref)
    loss = loss_fn(model(x), y)
    for r, g in zip(ref, torch.autograd.grad(loss, list(model.parameters()))):
        assert torch.allclose(r.float(), g, rtol=1e-4, atol=1e-12)


def test_scaled_fp16_grads_check_accepts_and_shows_the_gap(small_problem, capsys):
    assert fg.check_scaled_fp16_grads("g", grads_ok, *small_problem, scales=[2.0 ** 12, 2.0 ** 14], tolerance=0.02,
                                      plain_fp16=KEY.scaled_fp16_grads, show=True) is None
    printed = capsys.readouterr().out
    values = [float(part.rsplit(": ", 1)[1]) for part in printed.split(": ", 1)[1].strip().split("; ")]
    assert "plain fp16" in printed and values[0] >= 0.5 and all(v < 0.02 for v in values[1:])
    assert fg.check_shows_fp16("g", grads_ok, *small_problem, plain_fp16=KEY.scaled_fp16_grads) is None
    # without the key (a visible test) only the answer's own errors are shown
    fg.check_scaled_fp16_grads("g", grads_ok, *small_problem, scales=[2.0 ** 12], tolerance=0.02, show=True)
    printed = capsys.readouterr().out
    assert "plain fp16" not in printed and "yours, scale 4096" in printed


@pytest.mark.parametrize("fn, words", [
    (grads_ignoring_scale, "exactly 0"),
    (grads_not_unscaled, "times too large"),
    (grads_in_place, "changed the caller's model"),
])
def test_scaled_fp16_grads_check_names_the_bug(small_problem, fn, words):
    with pytest.raises(GradingError) as excinfo:
        fg.check_scaled_fp16_grads("g", fn, *small_problem, scales=[2.0 ** 12], tolerance=0.02)
    assert words in message(excinfo)


def test_a_float32_answer_fails_the_fp16_check(small_problem):
    fg.check_scaled_fp16_grads("g", grads_in_fp32, *small_problem, scales=[2.0 ** 12], tolerance=0.02)
    with pytest.raises(GradingError, match="as accurate as float32"):
        fg.check_shows_fp16("g", grads_in_fp32, *small_problem, plain_fp16=KEY.scaled_fp16_grads)


def test_existing_grad_of_the_caller_is_protected(small_problem):
    model, loss_fn, x, y = small_problem
    for p in model.parameters():
        p.grad = torch.ones_like(p)

    def touches_grad(model, loss_fn, x, y, scale):
        grads = grads_ok(model, loss_fn, x, y, scale)
        next(model.parameters()).grad.zero_()
        return grads

    fg.check_scaled_fp16_grads("g", grads_ok, model, loss_fn, x, y, scales=[2.0 ** 12], tolerance=0.02)
    with pytest.raises(GradingError, match="changed .grad"):
        fg.check_scaled_fp16_grads("g", touches_grad, model, loss_fn, x, y, scales=[2.0 ** 12], tolerance=0.02)


def test_too_easy_inputs_are_a_grader_error(small_problem):
    model, _, x, y = small_problem
    with pytest.raises(RuntimeError, match="too easy"):
        fg.check_scaled_fp16_grads("g", grads_ok, model, F.mse_loss, x, y, scales=[2.0 ** 12],
                                   plain_fp16=KEY.scaled_fp16_grads)
    with pytest.raises(RuntimeError, match="too easy"):
        fg.check_shows_fp16("g", grads_ok, model, F.mse_loss, x, y, plain_fp16=KEY.scaled_fp16_grads)


# --- DynamicLossScaler ---------------------------------------------------------------------------------
def test_stream_patterns_are_validated():
    with pytest.raises(ValueError, match="unknown steps"):
        GradientStream("bad", "..x", seed=0)
    with pytest.raises(ValueError, match="power of 2"):
        GradientStream("bad", "B", seed=0, overflow_from=1000.0)


def test_stream_coefficients_hold_what_the_pattern_says():
    stream = GradientStream("all kinds", ".+-NBS", seed=4, overflow_from=2.0 ** 10)
    coeffs = [torch.cat([c.flatten() for c in stream.coefficients(t, "cpu")]) for t in range(6)]
    assert torch.isfinite(coeffs[0]).all()
    assert (coeffs[1] == math.inf).sum() == 1 and (coeffs[2] == -math.inf).sum() == 1 and coeffs[3].isnan().sum() == 1
    big = coeffs[4].abs().max()
    assert torch.isfinite(big * 2.0 ** 9) and not torch.isfinite(big * 2.0 ** 10)
    assert torch.isfinite(coeffs[5]).all() and not torch.isfinite(coeffs[5].sum())
    again = torch.cat([c.flatten() for c in stream.coefficients(0, "cpu")])
    assert torch.equal(coeffs[0], again)


STREAMS = [
    (GradientStream("mixed", "..+....N.-......", seed=1), dict(init_scale=1024.0, growth_interval=3)),
    (GradientStream("sawtooth", "B" * 30, seed=2, overflow_from=2.0 ** 10),
     dict(init_scale=2.0 ** 14, growth_interval=3)),
    (GradientStream("factors", ".N...+....", seed=3), dict(init_scale=100.0, growth_factor=3.0, backoff_factor=0.3,
                                                             growth_interval=2)),
    (GradientStream("huge", "..S..", seed=4), dict(init_scale=1.0, growth_interval=50)),
]


@pytest.mark.parametrize("stream, settings", STREAMS, ids=[s.name for s, _ in STREAMS])
@pytest.mark.parametrize("unscale_first", [False, True])
def test_a_correct_scaler_matches_gradscaler(stream, settings, unscale_first):
    reference, got = sr.side_by_side("s", Scaler, stream, unscale_first=unscale_first,
                                                clip=1.0 if unscale_first else None, **settings)
    assert sr.check_against_gradscaler("s", Scaler, stream, **settings) is None
    assert len(reference) == len(got) == len(stream.pattern)
    assert [r.stepped for r in reference] == [g.stepped for g in got]


def test_the_sawtooth_really_overflows_and_grows():
    reference, _ = sr.side_by_side("s", Scaler, *STREAMS[1][:1], **STREAMS[1][1])
    scales = [r.scale_after for r in reference]
    assert not all(r.stepped for r in reference) and max(scales[10:]) > min(scales[10:])


def test_a_wrong_scaler_is_named_at_its_first_wrong_step():
    with pytest.raises(GradingError) as excinfo:
        sr.check_against_gradscaler("DynamicLossScaler", GrowsEveryStep, *STREAMS[0][:1], **STREAMS[0][1])
    text = message(excinfo)
    assert "at step 0" in text and "after update() the scale is 2048.0, GradScaler's is 1024.0" in text
    assert "step  grads | GradScaler" in text


def test_unscaling_twice_and_stepping_on_nan_are_explained():
    with pytest.raises(GradingError, match="not divided by the scale exactly once"):
        sr.check_against_gradscaler("s", UnscalesTwice, STREAMS[0][0], unscale_first=True, **STREAMS[0][1])
    with pytest.raises(GradingError, match="GradScaler skipped this step"):
        sr.check_against_gradscaler("s", StepsOnNaN, *STREAMS[0][:1], **STREAMS[0][1])


def test_long_histories_are_cut_to_the_last_rows():
    stream = GradientStream("long", "." * 30 + "N", seed=5)

    class MissesNaN(Scaler):
        def unscale_(self, optimizer):
            super().unscale_(optimizer)
            self.bad = False

    with pytest.raises(GradingError) as excinfo:
        sr.check_against_gradscaler("s", MissesNaN, stream, init_scale=8.0, growth_interval=100)
    assert "earlier steps agree" in message(excinfo) and "at step 30" in message(excinfo)


def test_gradscaler_itself_is_refused_however_it_is_reached():
    class Subclass(torch.amp.GradScaler):
        def __init__(self, **kwargs):
            super().__init__("cpu", **kwargs)

    profile = sys.getprofile()
    with pytest.raises(GradingError, match="called torch.amp.grad_scaler.GradScaler"):
        sr.check_against_gradscaler("s", Subclass, *STREAMS[0][:1], **STREAMS[0][1])
    with pytest.raises(GradingError, match="_amp_update_scale_"):
        sr.check_against_gradscaler("s", KernelUser, *STREAMS[0][:1], **STREAMS[0][1])
    assert sys.getprofile() is profile


def test_errors_in_the_learner_methods_name_the_call_and_step():
    class Broken(Scaler):
        def update(self):
            raise ValueError("oops")

    with pytest.raises(GradingError, match=r"at step 0, update\(\) raised ValueError: oops"):
        sr.check_against_gradscaler("s", Broken, *STREAMS[0][:1], **STREAMS[0][1])


def test_check_defaults():
    sr.check_defaults("s", Scaler)

    class Keywords(Scaler):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)

    sr.check_defaults("s", Keywords)  # declares nothing: left to the behaviour checks
    with pytest.raises(GradingError, match="default of growth_interval is 100"):
        sr.check_defaults("s", OtherDefault)


# --- trusted grading: the learner's code runs in a driver, the comparisons here ------------------------
class KernelWithoutComparisons(mutation.Loopback):
    """A kernel where the submission has disabled the comparisons it can reach."""

    def ask(self, request, response):
        with mock.patch.object(torch, "allclose", lambda *a, **k: True), \
                mock.patch.object(torch, "equal", lambda *a, **k: True), \
                mock.patch.object(torch, "isclose", lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)):
            super().ask(request, response)


def run_trusted(source, implementation, kernel=mutation.Loopback):
    """Run a test cell as trusted grading does: the learner's name `g` is a stand-in, reached only
    through `kernel` (mutation's in-process kernel: data-only answers, a random generator of its
    own); return the cell's error, or None."""
    with mock.patch.object(mutation, "Loopback", kernel):
        return mutation._run_cell(source, "test", {"__name__": "__main__", "g": implementation}, True)


SCALED_CELL = """
import torch
from autograder.checks.nb05_loss_scaling import fp16_gradients as fg, scaler_runs as sr
net = fg.float32_mlp((6, 16, 8), seed=10, device="cpu")
for i, p in enumerate(net.parameters()):
    p.grad = torch.full_like(p, float(i + 1))
held = [p.grad.clone() for p in net.parameters()]
x = torch.randn(32, 6, generator=torch.Generator().manual_seed(1))
y = torch.randn(32, 8, generator=torch.Generator().manual_seed(2))
fg.check_scaled_fp16_grads("g", g, net, fg.small_mse(20), x, y, scales=[2.0 ** 12, 2.0 ** 14], tolerance=0.02)
from autograder.grader.keys import answer_key
fg.check_shows_fp16("g", g, net, fg.small_mse(20), x, y, plain_fp16=answer_key("05_loss_scaling").scaled_fp16_grads)
# the grader's model is as it was: its .grad kept (a pickled module travels without it), float32
assert all(torch.equal(p.grad, h) and p.dtype == torch.float32 for p, h in zip(net.parameters(), held)), "model changed"
"""


def shallow_copy(model, loss_fn, x, y, scale):
    half = copy.copy(model).half()  # the caller's parameters become fp16
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [p.grad.float() / scale for p in half.parameters()]


def touches_grad(model, loss_fn, x, y, scale):
    grads = grads_ok(model, loss_fn, x, y, scale)
    next(model.parameters()).grad.zero_()
    return grads


@pytest.mark.parametrize("kernel", [mutation.Loopback, KernelWithoutComparisons])
@pytest.mark.parametrize("implementation, words", [
    (grads_ok, None),
    (grads_in_place, "parameter '0.weight' is now torch.float16"),
    (shallow_copy, "parameter '0.weight' is now torch.float16"),
    (touches_grad, "changed .grad of the caller's parameter '0.weight'"),
    (grads_ignoring_scale, "exactly 0"),
    (grads_in_fp32, "as accurate as float32"),
], ids=lambda v: getattr(v, "__name__", None))
def test_trusted_scaled_fp16_grads_judges_the_callers_model_as_the_call_left_it(implementation, words, kernel):
    err = run_trusted(SCALED_CELL, implementation, kernel)
    if words is None:
        assert err is None
    else:
        assert isinstance(err, GradingError) and words in str(err), err


SCALER_CELL = """
from autograder.checks.nb05_loss_scaling import fp16_gradients as fg, scaler_runs as sr
stream = sr.GradientStream("mixed", "..+....N.-......", seed=1)
sr.check_defaults("g", g)
reference, got = sr.side_by_side("g", g, stream, unscale_first=True, clip=1.0, init_scale=1024.0, growth_interval=3)
assert [r.stepped for r in reference] == [r.stepped for r in got] and got[3].grads is not None
"""


def not_a_class():
    return Scaler()


@pytest.mark.parametrize("kernel", [mutation.Loopback, KernelWithoutComparisons])
@pytest.mark.parametrize("implementation, words", [
    (Scaler, None),
    (not_a_class, "expected a class, but the name holds"),
    (OtherDefault, "the default of growth_interval is 100"),
    (UnscalesTwice, "not divided by the scale exactly once"),
    (KernelUser, "_amp_update_scale_"),
], ids=lambda v: getattr(v, "__name__", None))
def test_trusted_scaler_checks_drive_the_class_in_the_kernel_and_compare_here(implementation, words, kernel):
    err = run_trusted(SCALER_CELL, implementation, kernel)
    if words is None:
        assert err is None
    else:
        assert isinstance(err, GradingError) and words in str(err), err


def test_trusted_scaler_check_gives_the_plain_message():
    stream, settings = STREAMS[0]
    with pytest.raises(GradingError) as plain:
        sr.check_against_gradscaler("g", GrowsEveryStep, stream, **settings)
    cell = f"""
from autograder.checks.nb05_loss_scaling import fp16_gradients as fg, scaler_runs as sr
stream = sr.GradientStream({stream.name!r}, {stream.pattern!r}, seed={stream.seed})
sr.check_against_gradscaler("g", g, stream, **{settings!r})
"""
    err = run_trusted(cell, GrowsEveryStep)
    assert isinstance(err, GradingError) and str(err) == message(plain)


def test_trusted_scaler_check_compares_what_comes_back_with_gradscaler_here():
    """A kernel that sends back a run GradScaler would not make is caught: the verdict is the grader's."""
    class Forging(mutation.Loopback):
        def call(self, exercise, fn, args, options):
            answer = super().call(exercise, fn, args, options)
            if isinstance(answer, sr.LearnerRun):
                answer.records[2].stepped, answer.records[2].returned = 1, True  # GradScaler skips step 2's inf
            return answer

    err = run_trusted(SCALER_CELL.replace("unscale_first=True", "unscale_first=False"), Scaler, Forging)
    assert isinstance(err, GradingError) and "GradScaler skipped this step" in str(err), err
