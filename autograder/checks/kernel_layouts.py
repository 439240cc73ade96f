"""Each tensor input of a graded function in a layout of its own, as real callers hand them over.

A kernel gets a pointer and the strides it is told; which strides are right is each input's own
business. `.sum().backward()` hands a backward a grad_out expanded from one number (strides (0, 0)), a
transpose is stored column by column, a slice has gaps, a weight may be a view. A kernel that reads one
input with another's strides, or as contiguous memory, is right only while every input shares one
layout, so the hidden tests give each input a layout of its own (`LAYOUTS`, named as the battery names
them).

`run_laid_out` is the driver (it runs where the learner's code runs, called through
`kernel_verdicts.call_guarded`): it puts each input in marked memory (`kernel_guard.Region`) in its layout, then makes
the call in the guard, as `kernel_guard.run_guarded` does for contiguous and gapped inputs.
"""
import torch

from autograder.checks.kernel_guard import Region, guarded, report, require_triton

LAYOUTS = ("non-contiguous", "transposed", "expanded", "heads-transposed")


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def strides(t, layout):
    """The strides `t` gets in `layout` ("transposed": column by column; "heads-transposed": a (B, H, N, d) tensor
    stored as (B, N, H, d), as attention's heads come out of a projection; "expanded": 0 along every
    dimension whose slices are all equal, as a view made by `.expand` has), or None for "non-contiguous"
    (the guard's gapped layout) and for no layout."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; the layouts are {', '.join(LAYOUTS)}")
    if layout == "non-contiguous" or t.numel() == 0 or t.dim() == 0:
        return None
    if layout == "heads-transposed":
        if t.dim() != 4:
            raise ValueError(f"heads transposed from (B, N, H, d) need four dimensions, got shape {tuple(t.shape)}")
        b, h, n, d = _contiguous_strides((t.shape[0], t.shape[2], t.shape[1], t.shape[3]))
        return b, n, h, d
    if layout == "transposed":
        if t.dim() < 2:
            raise ValueError(f"a transposed layout needs two dimensions, got shape {tuple(t.shape)}")
        swapped = _contiguous_strides((*t.shape[:-2], t.shape[-1], t.shape[-2]))
        return (*swapped[:-2], swapped[-1], swapped[-2])
    repeats = [size == 1 or bool((t == t.narrow(d, 0, 1)).all()) for d, size in enumerate(t.shape)]
    kept = _contiguous_strides([1 if repeat else size for repeat, size in zip(repeats, t.shape)])
    return tuple(0 if repeat else step for repeat, step in zip(repeats, kept))


def laid_out(name, t, layout=None) -> Region:
    """`t`'s values in marked memory (`kernel_guard.Region`), in `layout` (None: contiguous)."""
    stride = None if layout is None else strides(t, layout)
    if stride is None:
        return Region.input(name, t, gapped=layout == "non-contiguous")
    region = Region.around(name, t.shape, stride, t.dtype, t.device)
    own = tuple(slice(0, 1) if step == 0 else slice(None) for step in stride)  # one copy of each repeated value
    region.view[own].copy_(t[own])
    region.original = region.view.clone()
    return region


def run_laid_out(fn, *values, names, layouts):
    """Driver: `fn(*values)` on marked copies, each input in its layout (`layouts`: {name: layout}),
    inside the guard. Pass it to `checks.call_student` (as a partial with `fn`) so it runs where `fn` lives."""
    require_triton()
    regions = [laid_out(name, v, layouts.get(name)) if isinstance(v, torch.Tensor) else v
               for name, v in zip(names, values)]
    args = [r.view if isinstance(r, Region) else r for r in regions]
    inputs = [r for r in regions if isinstance(r, Region)]
    with guarded(known=[r.buffer for r in inputs]) as guard:
        result = fn(*args)
    return report(guard, inputs, result)


def story(name, t, layout) -> str:
    """Why `name`'s layout broke an answer, with its strides: the reason a failure message gives."""
    stride = strides(t, layout)
    made = "as the grad_out that .sum().backward() hands on" if name == "grad_out" else "as .expand makes it"
    shared = (f"one number in memory for every element, {made}" if stride and not any(stride)
              else "rows that share one memory, as .expand makes them")
    how = {"expanded": f"strides {stride}: {shared}",
           "transposed": f"strides {stride}: stored column by column, as a transpose is",
           "non-contiguous": "gaps between its elements and rows, as a slice has",
           "heads-transposed": f"strides {stride}: heads transposed from (B, N, H, d), as a projection's output is "
                               "split into heads"}[layout]
    return (f"{name} has a layout of its own ({how}). A kernel that reads it with another tensor's strides, or as "
            f"if it were contiguous, reads the wrong elements: pass {name}'s own strides to the kernel "
            f"({name}.stride(0), ...), or call {name}.contiguous() first (a copy, allowed outside the kernel)")
