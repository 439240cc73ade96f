"""Notebook 02's reference `Value` against micrograd 0.1.0, the published package, in one run.

1. backward() through a chain of 100,000 operations: the reference engine, timed; micrograd's
   recursive topological sort raises RecursionError (shown, not assumed).
2. One training step of a 2-16-16-1 MLP on 100 points (forward, hinge loss + L2, zero_grad,
   backward, update), the same code for both engines taking turns, median of several repeats,
   with Python's cycle collector as usual and paused (as the notebook trains), and the ratios.

The reference engine is not copied here: the solution cells of
solutions/02_micrograd/02_micrograd.ipynb are executed. Run from the repository root:
`.venv/bin/python benchmarks/engine.py` (micrograd is not a dependency of the course:
`pip install micrograd==0.1.0` first).
"""
import contextlib
import gc
import math
import os
import pathlib
import platform
import random
import statistics
import sys
import time

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "solutions" / "02_micrograd" / "02_micrograd.ipynb"
CHAIN_STEPS = 50_000  # two operations a step: 100,000 nodes with an operation
REPEATS = 7


def reference_engine() -> dict:
    """Value, Neuron, Layer, MLP, draw_dot: the solution cells of notebook 02, executed."""
    import graphviz

    namespace = {"__name__": "reference_engine", "math": math, "random": random, "graphviz": graphviz}
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            exec(compile(cell.source, f"<{NOTEBOOK.name}: {cell.id}>", "exec"), namespace)
    return namespace


@contextlib.contextmanager
def collector(paused: bool):
    """Python's automatic cycle collection as usual; or, as the notebook trains, off, with the
    objects alive now frozen (later collections skip them): collections happen where asked."""
    gc.collect()
    if paused:
        gc.freeze()
        gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()
        gc.collect()


def chain(Value, steps):
    first = v = Value(0.5)
    for _ in range(steps):
        v = v * 0.99999 + 0.00001
    return first, v


def time_chain(Value):
    """(median build seconds, median backward seconds, d v_end / d v_0) over REPEATS // 2 + 1 runs."""
    builds, backwards = [], []
    for _ in range(REPEATS // 2 + 1):
        with collector(paused=False):
            start = time.perf_counter()
            first, last = chain(Value, CHAIN_STEPS)
            built = time.perf_counter()
            last.backward()
            done = time.perf_counter()
        builds.append(built - start)
        backwards.append(done - built)
        grad = first.grad
        del first, last
    return statistics.median(builds), statistics.median(backwards), grad


def data(n=100, seed=0):
    """n points in the plane with labels +1/-1 (two noisy half-circles), seeded."""
    rng = random.Random(seed)
    X, y = [], []
    for i in range(n):
        angle = math.pi * rng.random()
        if i % 2 == 0:
            X.append([math.cos(angle) + rng.gauss(0, 0.1), math.sin(angle) + rng.gauss(0, 0.1)])
        else:
            X.append([1 - math.cos(angle) + rng.gauss(0, 0.1), 0.5 - math.sin(angle) + rng.gauss(0, 0.1)])
        y.append(1 if i % 2 == 0 else -1)
    return X, y


def training_step(model, X, y, lr=0.05, alpha=1e-4):
    scores = [model(x) for x in X]
    data_loss = sum((1 + -t * s).relu() for t, s in zip(y, scores)) * (1.0 / len(X))
    loss = data_loss + alpha * sum(p * p for p in model.parameters())
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data -= lr * p.grad


def time_steps(engines, paused):
    """{name: median seconds of one training step}, REPEATS steps each after one warm-up step.

    With the collector paused, every step frees its own garbage, and the engines take turns, one
    step each, so that a slow moment of the machine hits both. With the collector as usual, the
    garbage one engine leaves would be collected during the other's steps, so each runs alone."""
    X, y = data()
    models = {}
    for name, MLP in engines.items():
        random.seed(1337)
        models[name] = MLP(2, [16, 16, 1])
    times = {name: [] for name in engines}

    def timed_step(name):
        start = time.perf_counter()
        training_step(models[name], X, y)
        if paused:
            gc.collect()  # free this step's graph, inside the timing
        return time.perf_counter() - start

    if paused:
        with collector(paused=True):
            for k in range(REPEATS + 1):
                for name in models:
                    seconds = timed_step(name)
                    if k:
                        times[name].append(seconds)
    else:
        for name in models:
            with collector(paused=False):
                times[name] = [timed_step(name) for _ in range(REPEATS + 1)][1:]
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    try:
        import micrograd
        from micrograd import engine as mg_engine
        from micrograd import nn as mg_nn
    except ImportError:
        print("micrograd is not installed; this benchmark compares with micrograd 0.1.0. Install it with:\n"
              "    pip install micrograd==0.1.0")
        return 1
    version = getattr(micrograd, "__version__", None)
    if version is None:
        try:
            from importlib.metadata import version as installed_version
            version = installed_version("micrograd")
        except Exception:  # an unpackaged copy: say so rather than guess
            version = "unknown version"
    ref = reference_engine()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{sys.version.split()[0]}; reference: {NOTEBOOK.relative_to(ROOT)}; micrograd {version}")

    print(f"\n1. backward() through a chain of {2 * CHAIN_STEPS:,} operations (v = v * 0.99999 + 0.00001)")
    build, backward, grad = time_chain(ref["Value"])
    print(f"   reference: build {build:.3f} s, backward {backward:.3f} s (median of {REPEATS // 2 + 1}); "
          f"d v_end/d v_0 = {grad:.10f}, exact {0.99999 ** CHAIN_STEPS:.10f}")
    first, last = chain(mg_engine.Value, CHAIN_STEPS)
    try:
        last.backward()
        print(f"   micrograd: backward finished, d v_end/d v_0 = {first.grad:.10f}")
    except RecursionError as err:
        print(f"   micrograd: cannot: its recursive build_topo raised RecursionError ({err}); "
              f"recursion limit {sys.getrecursionlimit()}")
    del first, last

    print("\n2. one training step, MLP 2-16-16-1 on 100 points: forward, hinge loss + L2, zero_grad, "
          f"backward, update (median of {REPEATS})")
    for paused, how in ((False, "cycle collector as usual"), (True, "cycle collector paused, one gc.collect() a step")):
        medians = time_steps({"reference": ref["MLP"], "micrograd": mg_nn.MLP}, paused)
        ours, theirs = medians["reference"], medians["micrograd"]
        print(f"   {how}:\n      reference {1e3 * ours:7.1f} ms, micrograd {1e3 * theirs:7.1f} ms: "
              f"the reference takes {ours / theirs:.2f} x micrograd's time ({theirs / ours:.2f} x faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
