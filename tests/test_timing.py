"""autograder.learner.timing: a verdict only where the runs do not overlap."""
import pytest

from autograder.learner import timing


def test_median_and_quartiles():
    s = timing.Spread.of([1, 2, 3, 4, 5])
    assert s.median == 3 and s.quartiles == (2, 4)
    with pytest.raises(ValueError):
        timing.Spread.of([1.0])


def test_overlapping_runs_give_no_verdict():
    a, b = timing.Spread.of([1.0, 1.2, 1.4, 1.6]), timing.Spread.of([1.2, 1.4, 1.6, 1.8])
    assert not timing.clearly_different(a, b)
    text = timing.verdict("a", a, "b", b, too_noisy="Published: b is 10% slower.")
    assert "too noisy" in text and "Published" in text and "faster" not in text


def test_separated_runs_name_the_faster_and_the_ratio():
    a, b = timing.Spread.of([1.0, 1.1, 1.2]), timing.Spread.of([2.0, 2.2, 2.4])
    assert timing.clearly_different(a, b)
    text = timing.verdict("fused", a, "op by op", b)
    assert "fused is 2.00x faster than op by op" in text and "too noisy" not in text
    assert "ms" not in text and "1.1 s" in text
    assert "2.00x smaller" in timing.verdict("x", a, "y", b, unit="bytes")


def test_wall_times_interleaves_rounds_and_skips_warmup():
    calls = []
    spreads = timing.wall_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                repeats=3, warmup=1, device="cpu")
    assert calls == ["a", "b"] * 4
    assert set(spreads) == {"a", "b"} and all(len(s.values) == 3 for s in spreads.values())
