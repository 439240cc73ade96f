"""Timings that say only what they measured: repeated, shown as a median with its spread, and a
verdict only where the difference is larger than the noise.

Why: one timing on a laptop or a shared machine can be off by a factor of two (another program,
a frequency change, the garbage collector). So every comparison a notebook prints runs each
candidate several times, interleaved round by round so that a slow spell hits all of them, and
reports the median and the middle half of the runs (first to third quartile). Two candidates are
called different only when their middle halves do not overlap; otherwise the notebook says the
machine is too noisy to tell.
"""
import dataclasses
import statistics
import time

import torch

from autograder.learner.device import get_device


@dataclasses.dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity: median and middle half (quartiles)."""

    values: tuple

    @classmethod
    def of(cls, values):
        values = tuple(float(v) for v in values)
        if len(values) < 2:
            raise ValueError("a spread needs at least two measurements")
        return cls(values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def quartiles(self) -> tuple:
        q1, _, q3 = statistics.quantiles(self.values, n=4, method="inclusive")
        return q1, q3

    def describe(self, unit="s") -> str:
        q1, q3 = self.quartiles
        return (f"median {_format(self.median, unit)} (middle half {_format(q1, unit)} to {_format(q3, unit)}, "
                f"{len(self.values)} runs)")


def _format(value, unit):
    if unit != "s":
        return f"{value:.3g} {unit}".rstrip()
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= scale or scale == 1e-6:
            return f"{value / scale:.3g} {name}"
    return f"{value:.3g} s"


def clearly_different(a: Spread, b: Spread) -> bool:
    """True when the middle halves of the two sets of runs do not overlap."""
    (a1, a3), (b1, b3) = a.quartiles, b.quartiles
    return a3 < b1 or b3 < a1


def _synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def wall_times(candidates: dict, repeats=7, warmup=1, device=None) -> dict:
    """{name: Spread of seconds per call} for each zero-argument function in `candidates`, run in
    interleaved rounds (a, b, c, a, b, c, ...) after `warmup` untimed rounds; CUDA work is waited for."""
    device = device or get_device()
    times = {name: [] for name in candidates}
    for round_ in range(warmup + repeats):
        for name, fn in candidates.items():
            _synchronize(device)
            start = time.perf_counter()
            fn()
            _synchronize(device)
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: Spread.of(values) for name, values in times.items()}


def verdict(name_a: str, a: Spread, name_b: str, b: Spread, unit="s", too_noisy="") -> str:
    """One sentence: which is faster (smaller) and by how much, or that the machine cannot tell.

    `too_noisy` is added when the runs overlap, e.g. the published figure the notebook cites.
    """
    shown = f"{name_a}: {a.describe(unit)}; {name_b}: {b.describe(unit)}."
    if not clearly_different(a, b):
        note = f" {too_noisy}" if too_noisy else ""
        return f"{shown} Their middle halves overlap: this machine is too noisy to tell them apart.{note}"
    small, large = (name_a, name_b) if a.median < b.median else (name_b, name_a)
    ratio = max(a.median, b.median) / min(a.median, b.median)
    word = "faster" if unit == "s" else "smaller"
    return f"{shown} {small} is {ratio:.2f}x {word} than {large}, beyond the spread of the runs."
