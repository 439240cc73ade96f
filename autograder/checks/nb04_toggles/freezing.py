"""freeze_all_but: the flags it sets, the list it returns, an optimizer step over every parameter,
and what it does with a name that is not in the model.

The reference is the specification itself (exactly the named parameters train) and, for the
training step, the gradients of the unfrozen model computed by autograd: nothing here freezes.
"""
import dataclasses

import torch

from autograder import checks
from autograder.checks.nb04_toggles.cases import expect_close_reordered, run_case, summary
from autograder.checks.nb04_toggles.models import batch_for, describe_model
from autograder.learner import inputs
from autograder.learner.device import get_device


def check_freeze_flags(exercise, fn, build, trainable, *, seed, frozen_before=()):
    """After fn(model, trainable): exactly the named parameters require grad, and fn returned
    exactly those Parameter objects (any order, each once)."""
    _freeze_and_check_flags(exercise, fn, build, trainable, seed=seed, frozen_before=frozen_before)


def _freeze_and_check_flags(exercise, fn, build, trainable, *, seed, frozen_before=()):
    """check_freeze_flags; returns the model and what fn returned."""
    model = build(seed)
    for name, p in model.named_parameters():
        if name in frozen_before:
            p.requires_grad_(False)
    case = (f"{describe_model(model)}; trainable={trainable!r}"
            + (f"; {sorted(frozen_before)} frozen before the call" if frozen_before else ""))
    got = run_case(exercise, lambda: fn(model, trainable), case)
    wanted = set(trainable)
    wrong = [(n, p.requires_grad) for n, p in model.named_parameters() if p.requires_grad != (n in wanted)]
    if wrong:
        details = "\n".join(f"    {n}: requires_grad={flag}, should be {not flag}" for n, flag in wrong)
        checks.fail(exercise, "wrong requires_grad flags",
                    details=f"  case: {case}\n{details}{_flags_hint(model, wanted, wrong)}")
    if not isinstance(got, (list, tuple)):
        checks.fail(exercise, f"should return a list of the trainable parameters, got {summary(got)}",
                    details=f"  case: {case}")
    by_id = {id(p): n for n, p in model.named_parameters()}
    strangers = [g for g in got if id(g) not in by_id]
    if strangers:
        checks.fail(exercise, "returned something that is not a parameter of the model: "
                              f"{checks.describe(strangers[0])}",
                    details=f"  case: {case}\n  hint: return the Parameter objects themselves (p, not p.data, a name "
                            "or a copy), so that an optimizer built from the list updates the model")
    names = [by_id[id(g)] for g in got]
    if sorted(names) != sorted(wanted) or len(names) != len(set(names)):
        extra = sorted(set(names) - wanted)
        missing = sorted(wanted - set(names))
        twice = sorted({n for n in names if names.count(n) > 1})
        checks.fail(exercise, "the returned list should hold each trainable parameter exactly once",
                    details=f"  case: {case}\n  returned: {names}"
                            + (f"\n  not trainable but returned: {extra}" if extra else "")
                            + (f"\n  trainable but missing: {missing}" if missing else "")
                            + (f"\n  returned more than once: {twice}" if twice else ""))
    return model, list(got)


def _flags_hint(model, wanted, wrong):
    names = [n for n, _ in model.named_parameters()]
    extra = [n for n, flag in wrong if flag and n not in wanted]
    if len(wrong) == len(names) and wanted:
        return "\n  hint: the flags are the wrong way round: the named parameters train, all others are frozen"
    if extra and len(extra) == len(names) - len(wanted):
        return ("\n  hint: nothing was frozen: set the flag on the parameter itself (p.requires_grad_(False)); "
                "p.data or p.detach() is a new tensor each time, and its flag means nothing to the model")
    if any(t in n for n in extra for t in wanted):
        return "\n  hint: compare whole names ('2.weight' is not '12.weight'), not substrings or endings"
    if any(not flag and n in wanted for n, flag in wrong):
        return "\n  hint: a parameter named in `trainable` must train, even if it was frozen before the call"
    return ""


def _loss_of(model, seed, dtype, device):
    x = batch_for(model, 7, seed + 1, dtype, device)
    out = model(x)
    target = inputs.randn(*out.shape, seed=seed + 2, dtype=dtype, device=device)
    return ((out - target) ** 2).mean()


def check_freeze_training(exercise, fn, build, trainable, *, seed, frozen_before=(), dtype=torch.float64):
    """One step of AdamW over *all* model.parameters(): the named parameters receive the gradient
    they would have without freezing and move; every other one gets no .grad and stays bit-identical."""
    device = get_device()
    model, _ = _freeze_and_check_flags(exercise, fn, lambda s: build(s, dtype, device), trainable,
                                       seed=seed, frozen_before=frozen_before)
    case = f"{describe_model(model)}; trainable={trainable!r}, {dtype}"
    reference = build(seed, dtype, device)
    ref_params = dict(reference.named_parameters())
    wanted = [n for n, _ in model.named_parameters() if n in set(trainable)]
    expected = torch.autograd.grad(_loss_of(reference, seed, dtype, device), [ref_params[n] for n in wanted])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    optimizer.zero_grad()
    run_case(exercise, lambda: _loss_of(model, seed, dtype, device).backward(), case)
    for name, p in model.named_parameters():
        if name not in set(trainable) and p.grad is not None:
            checks.fail(exercise, f"after freeze_all_but, backward() still gave {name} a gradient",
                        details=f"  case: {case}\n  a frozen parameter must have requires_grad=False, "
                                "so that autograd skips it")
    missing = [n for n, p in model.named_parameters() if n in set(trainable) and p.grad is None]
    if missing:
        checks.fail(exercise, f"backward() gave no gradient to the trainable {missing}", details=f"  case: {case}")
    params = dict(model.named_parameters())
    expect_close_reordered(exercise, [params[n].grad for n in wanted], expected, case=case,
                           names=[f"{n}.grad" for n in wanted])
    optimizer.step()
    for name, p in model.named_parameters():
        moved = not torch.equal(p.detach(), before[name])
        if name in set(trainable) and not moved:
            checks.fail(exercise, f"the trainable {name} did not change in an optimizer step",
                        details=f"  case: {case}")
        if name not in set(trainable) and moved:
            change = (p.detach() - before[name]).abs().max().item()
            checks.fail(exercise, f"the frozen {name} changed in an optimizer step (by up to {change:.3g})",
                        details=f"  case: {case}")


@dataclasses.dataclass
class Caught:
    """An exception the learner's code raised, as data: its class name, message, and the names of its
    class and every base class (so that the grader can tell a ValueError subclass from anything else)."""
    type_name: str
    message: str
    lineage: tuple


def run_catching(fn, *args):
    """Driver: fn(*args); what it raised as a `Caught`, or None if it returned. NotImplementedError passes
    through, so that an exercise left undone reads as such."""
    try:
        fn(*args)
    except NotImplementedError:
        raise
    except Exception as err:  # the kind of error is judged by the check, outside the learner's call
        return Caught(type(err).__name__, str(err), tuple(c.__name__ for c in type(err).__mro__))
    return None


def check_freeze_unknown_name(exercise, fn, build, *, seed):
    """A name that is not a parameter of the model must raise ValueError or KeyError."""
    model = build(seed)
    typo = next(n for n, _ in model.named_parameters()).replace("weight", "weigth")
    case = f"{describe_model(model)}; trainable=[{typo!r}]"
    err = run_case(exercise, lambda: run_catching(fn, model, [typo]), case)
    if err is None:
        checks.fail(exercise, f"accepted the unknown name {typo!r} without a word",
                    details=f"  case: {case}\n  a typo would freeze every parameter and train nothing: "
                            "raise a ValueError (or KeyError) that names it")
    if not isinstance(err, Caught):  # not what run_catching returns: the answer did not come back as data
        checks.fail(exercise, f"no readable account of what happened for the unknown name {typo!r}: {summary(err)}",
                    details=f"  case: {case}")
    if not {"ValueError", "KeyError"} & set(err.lineage):
        checks.fail(exercise, f"raised {err.type_name} ({err.message}) for the unknown name {typo!r}",
                    details=f"  case: {case}\n  raise a ValueError (or KeyError) that names it"
                            + ("; an assert disappears when Python runs with -O"
                               if err.type_name == "AssertionError" else ""))
