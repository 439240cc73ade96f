"""The catalogue of plausible implementations of every graded name, one module per notebook.

Each module registers functions with `@wrong(name, why)` (a bug learners really write: the
hidden tests must reject it; `says="..."`: with a message that contains these words, e.g. the
battery's "non-contiguous dout") or `@right(name, how)` (a correct answer written differently from
the solution: the hidden tests must accept it). Each function is self-contained (imports inside),
so its source can also be pasted into a submission notebook.
"""
import importlib
import pkgutil

CATALOGUE = {}  # notebook -> {graded name -> {"wrong": [(label, fn)], "right": [(label, fn)]}}


def _register(kind, notebook, name, label, says=None):
    def add(fn):
        fn.says = says
        entry = CATALOGUE.setdefault(notebook, {}).setdefault(name, {"wrong": [], "right": []})
        entry[kind].append((label, fn))
        return fn
    return add


def wrong(notebook, name, label, says=None):
    return _register("wrong", notebook, name, label, says)


def right(notebook, name, label):
    return _register("right", notebook, name, label)


def load_all() -> dict:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return CATALOGUE
