"""Notebook 04: the autograd-toggle bugs learners write, and other correct answers."""
import functools

from mutants import right, wrong

NB = "04_toggles"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# accumulated_grads(model, loss_fn, x, y, micro_batches) --------------------------------------
# (the first entry is pasted into a submission by the nbgrader end-to-end test: a plain function)
@wrong_("accumulated_grads", "adds up the chunks' mean losses without dividing: micro_batches times too large")
def ag_no_division(model, loss_fn, x, y, micro_batches):
    import torch
    model.zero_grad()
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        loss_fn(model(xc), yc).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


@wrong_("accumulated_grads", "divides every chunk by the number of chunks: wrong weights for uneven chunks")
def ag_equal_weights(model, loss_fn, x, y, micro_batches):
    import torch
    model.zero_grad()
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        (loss_fn(model(xc), yc) / micro_batches).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


@wrong_("accumulated_grads", "never clears the gradients already in .grad before accumulating")
def ag_no_zero_grad(model, loss_fn, x, y, micro_batches):
    import torch
    n = len(x)
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        (loss_fn(model(xc), yc) * len(xc) / n).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


@wrong_("accumulated_grads", "zero_grad() inside the loop: only the last chunk survives")
def ag_zero_in_loop(model, loss_fn, x, y, micro_batches):
    import torch
    n = len(x)
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        model.zero_grad()
        (loss_fn(model(xc), yc) * len(xc) / n).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


@wrong_("accumulated_grads", "chunks of len(x) // micro_batches: the remainder samples are dropped")
def ag_drops_remainder(model, loss_fn, x, y, micro_batches):
    model.zero_grad()
    size = len(x) // micro_batches
    for i in range(micro_batches):
        xc, yc = x[i * size:(i + 1) * size], y[i * size:(i + 1) * size]
        (loss_fn(model(xc), yc) / micro_batches).backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


@wrong_("accumulated_grads", "adds the weighted chunk losses up and calls backward() once: every chunk's graph alive")
def ag_one_backward(model, loss_fn, x, y, micro_batches):
    import torch
    model.zero_grad()
    n = len(x)
    total = 0
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        total = total + loss_fn(model(xc), yc) * len(xc) / n
    total.backward()
    return tuple(p.grad.clone() for p in model.parameters() if p.requires_grad)


@wrong_("accumulated_grads", "returns .grad of every parameter, frozen ones (None) included")
def ag_all_params(model, loss_fn, x, y, micro_batches):
    import torch
    model.zero_grad()
    n = len(x)
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        (loss_fn(model(xc), yc) * len(xc) / n).backward()
    return tuple(p.grad for p in model.parameters())


@wrong_("accumulated_grads", "returns the .grad tensors themselves, not copies: the next backward() changes them",
        says="not a copy")
def ag_returns_grad_buffers(model, loss_fn, x, y, micro_batches):
    import torch
    model.zero_grad()
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        (loss_fn(model(xc), yc) * len(xc) / len(x)).backward()
    return tuple(p.grad for p in model.parameters() if p.requires_grad)


@wrong_("accumulated_grads", "returns the gradients but leaves .grad empty (torch.autograd.grad only)")
def ag_grad_not_stored(model, loss_fn, x, y, micro_batches):
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    n = len(x)
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        for acc, g in zip(total, torch.autograd.grad(loss_fn(model(xc), yc) * len(xc) / n, params)):
            acc += g
    for p in params:
        p.grad = None
    return tuple(total)


@right_("accumulated_grads", "torch.autograd.grad per chunk, summed by hand, then written into .grad")
def ag_autograd_grad(model, loss_fn, x, y, micro_batches):
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    for xc, yc in zip(torch.tensor_split(x, micro_batches), torch.tensor_split(y, micro_batches)):
        grads = torch.autograd.grad(loss_fn(model(xc), yc), params)
        for acc, g in zip(total, grads):
            acc.add_(g, alpha=len(xc) / len(x))
    for p, g in zip(params, total):
        p.grad = g.clone()
    return tuple(total)


@right_("accumulated_grads", "torch.split into chunks of ceil(N/k) samples, zero_grad(set_to_none=False)")
def ag_split_sizes(model, loss_fn, x, y, micro_batches):
    import math
    model.zero_grad(set_to_none=False)
    size = math.ceil(len(x) / micro_batches)
    for xc, yc in zip(x.split(size), y.split(size)):
        loss = loss_fn(model(xc), yc)
        (loss * xc.shape[0] / x.shape[0]).backward()
    return tuple(p.grad.detach().clone() for p in model.parameters() if p.requires_grad)


# distill_loss(student_logits, teacher_logits, T=2.0) -------------------------------------------
@wrong_("distill_loss", "detaches the student's logits instead of the teacher's")
def dl_detach_student(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    log_p_student = F.log_softmax(student_logits.detach() / T, dim=-1)
    p_teacher = F.softmax(teacher_logits / T, dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction="batchmean") * T ** 2


@wrong_("distill_loss", "does not detach the teacher: gradients flow into it")
def dl_teacher_not_detached(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    p_teacher = F.softmax(teacher_logits / T, dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction="batchmean") * T ** 2


@wrong_("distill_loss", "forgets the T**2 factor")
def dl_no_t_squared(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    p_teacher = F.softmax(teacher_logits.detach() / T, dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction="batchmean")


@wrong_("distill_loss", "reduction='mean': also divides by the number of classes")
def dl_mean_reduction(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    p_teacher = F.softmax(teacher_logits.detach() / T, dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction="mean") * T ** 2


@wrong_("distill_loss", "KL in the other direction: KL(student || teacher)")
def dl_reversed_kl(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    log_p_teacher = F.log_softmax(teacher_logits.detach() / T, dim=-1)
    return (log_p_student.exp() * (log_p_student - log_p_teacher)).sum(-1).mean() * T ** 2


@wrong_("distill_loss", "log(softmax(.)): -inf for large logits", says="float32 logits as large as a few hundred")
def dl_log_of_softmax(student_logits, teacher_logits, T=2.0):
    import torch
    import torch.nn.functional as F
    log_p_student = torch.log(F.softmax(student_logits / T, dim=-1))
    p_teacher = F.softmax(teacher_logits.detach() / T, dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction="batchmean") * T ** 2


@wrong_("distill_loss", "the KL written out with the teacher's probabilities: p * log(p) is 0 * -inf = NaN where one "
                        "underflows to 0", says="float32 logits as large as a few hundred")
def dl_p_log_p(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    p_teacher = F.softmax(teacher_logits.detach() / T, dim=-1)
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    return T ** 2 * (p_teacher * (p_teacher.log() - log_p_student)).sum(dim=-1).mean()


@wrong_("distill_loss", "softmax written out as exp(z) / exp(z).sum(): inf / inf = NaN for large logits",
        says="float32 logits as large as a few hundred")
def dl_softmax_by_hand(student_logits, teacher_logits, T=2.0):
    def softmax(z):
        e = z.exp()
        return e / e.sum(dim=-1, keepdim=True)
    p_teacher = softmax(teacher_logits.detach() / T)
    p_student = softmax(student_logits / T)
    return T ** 2 * (p_teacher * (p_teacher / p_student).log()).sum(dim=-1).mean()


@wrong_("distill_loss", "teacher_logits.requires_grad_(False): fails on logits that come out of a network")
def dl_requires_grad_false(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    teacher_logits.requires_grad_(False)
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    p_teacher = F.softmax(teacher_logits / T, dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction="batchmean") * T ** 2


@wrong_("distill_loss", "temperature on the student only")
def dl_temperature_student_only(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    p_teacher = F.softmax(teacher_logits.detach(), dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction="batchmean") * T ** 2


@wrong_("distill_loss", "imports the course's answer key instead of writing it")
def dl_imports_the_key(student_logits, teacher_logits, T=2.0):
    from autograder.grader.keys import answer_key
    return answer_key("04_toggles").distill_loss(student_logits, teacher_logits, T)


@right_("distill_loss", "the KL written out, teacher probabilities under torch.no_grad()")
def dl_by_hand(student_logits, teacher_logits, T=2.0):
    import torch
    with torch.no_grad():
        log_p_teacher = torch.log_softmax(teacher_logits / T, dim=-1)
    log_p_student = torch.log_softmax(student_logits / T, dim=-1)
    per_example = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(dim=-1)
    return T * T * per_example.mean()


@right_("distill_loss", "the KL written out with torch.xlogy, which makes 0 * log(0) zero")
def dl_xlogy(student_logits, teacher_logits, T=2.0):
    import torch
    p_teacher = torch.softmax(teacher_logits.detach() / T, dim=-1)
    log_p_student = torch.log_softmax(student_logits / T, dim=-1)
    per_example = (torch.xlogy(p_teacher, p_teacher) - p_teacher * log_p_student).sum(dim=-1)
    return per_example.mean() * T ** 2


@right_("distill_loss", "kl_div with probabilities as target, teacher detached")
def dl_probability_target(student_logits, teacher_logits, T=2.0):
    import torch.nn.functional as F
    p_teacher = F.softmax(teacher_logits.detach() / T, dim=1)
    loss = F.kl_div(F.log_softmax(student_logits / T, dim=1), p_teacher, reduction="sum")
    return loss / student_logits.shape[0] * T ** 2


# freeze_all_but(model, trainable) -------------------------------------------------------------
@wrong_("freeze_all_but", "requires_grad_(False) on the wrong set: freezes the named ones, trains the rest")
def fab_inverted(model, trainable):
    names = dict(model.named_parameters())
    for name in trainable:
        if name not in names:
            raise ValueError(name)
    kept = []
    for name, p in model.named_parameters():
        p.requires_grad_(name not in trainable)
        if name not in trainable:
            kept.append(p)
    return kept


@wrong_("freeze_all_but", "matches names by substring: '2.weight' also unfreezes '12.weight'")
def fab_substring(model, trainable):
    names = dict(model.named_parameters())
    for name in trainable:
        if name not in names:
            raise ValueError(name)
    kept = []
    for name, p in model.named_parameters():
        p.requires_grad_(any(t in name for t in trainable))
        if p.requires_grad:
            kept.append(p)
    return kept


@wrong_("freeze_all_but", "only freezes the others: a named parameter frozen before stays frozen")
def fab_never_unfreezes(model, trainable):
    names = dict(model.named_parameters())
    for name in trainable:
        if name not in names:
            raise ValueError(name)
    for name, p in model.named_parameters():
        if name not in trainable:
            p.requires_grad_(False)
    return [names[n] for n in trainable]


@wrong_("freeze_all_but", "sets the flag on p.data, a new tensor each time: nothing is frozen")
def fab_on_data(model, trainable):
    names = dict(model.named_parameters())
    for name in trainable:
        if name not in names:
            raise ValueError(name)
    for name, p in model.named_parameters():
        p.data.requires_grad = name in trainable
    return [names[n] for n in trainable]


@wrong_("freeze_all_but", "returns every parameter, not just the trainable ones")
def fab_returns_all(model, trainable):
    names = dict(model.named_parameters())
    for name in trainable:
        if name not in names:
            raise ValueError(name)
    for name, p in model.named_parameters():
        p.requires_grad_(name in trainable)
    return list(model.parameters())


@wrong_("freeze_all_but", "returns the names instead of the parameters")
def fab_returns_names(model, trainable):
    names = dict(model.named_parameters())
    for name in trainable:
        if name not in names:
            raise ValueError(name)
    for name, p in model.named_parameters():
        p.requires_grad_(name in trainable)
    return [n for n in names if n in trainable]


@wrong_("freeze_all_but", "silently ignores a name that is not in the model")
def fab_ignores_typos(model, trainable):
    kept = []
    for name, p in model.named_parameters():
        p.requires_grad_(name in trainable)
        if name in trainable:
            kept.append(p)
    return kept


@right_("freeze_all_but", "model.requires_grad_(False), then a dict lookup per name (KeyError on a typo)")
def fab_lookup(model, trainable):
    params = dict(model.named_parameters())
    model.requires_grad_(False)
    chosen = []
    for name in trainable:
        params[name].requires_grad_(True)
        chosen.append(params[name])
    return chosen


@right_("freeze_all_but", "p.requires_grad = name in wanted, in a comprehension")
def fab_flags(model, trainable):
    wanted = set(trainable)
    missing = wanted - {n for n, _ in model.named_parameters()}
    if missing:
        raise ValueError(f"unknown parameter names: {sorted(missing)}")
    for name, p in model.named_parameters():
        p.requires_grad = name in wanted
    return [p for p in model.parameters() if p.requires_grad]


# grad_fn_names(t) --------------------------------------------------------------------------
@wrong_("grad_fn_names", "depth first: a stack (list.pop()) instead of a queue")
def gfn_depth_first(t):
    if t.grad_fn is None:
        return []
    names, seen, stack = [], {t.grad_fn}, [t.grad_fn]
    while stack:
        node = stack.pop()
        names.append(type(node).__name__)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    return names


@wrong_("grad_fn_names", "no set of nodes seen: a node reached twice is listed twice")
def gfn_no_dedup(t):
    import collections
    if t.grad_fn is None:
        return []
    names, queue = [], collections.deque([t.grad_fn])
    while queue:
        node = queue.popleft()
        names.append(type(node).__name__)
        queue.extend(child for child, _ in node.next_functions if child is not None)
    return names


@wrong_("grad_fn_names", "deduplicates class names instead of nodes")
def gfn_dedup_names(t):
    import collections
    if t.grad_fn is None:
        return []
    names, queue = [], collections.deque([t.grad_fn])
    while queue:
        node = queue.popleft()
        name = type(node).__name__
        if name in names:
            continue
        names.append(name)
        queue.extend(child for child, _ in node.next_functions if child is not None)
    return names


@wrong_("grad_fn_names", "leaves out the AccumulateGrad nodes")
def gfn_no_accumulate(t):
    import collections
    if t.grad_fn is None:
        return []
    names, seen, queue = [], {t.grad_fn}, collections.deque([t.grad_fn])
    while queue:
        node = queue.popleft()
        if type(node).__name__ != "AccumulateGrad":
            names.append(type(node).__name__)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return names


@wrong_("grad_fn_names", "node.name(): 'torch::autograd::AccumulateGrad'")
def gfn_cpp_names(t):
    import collections
    if t.grad_fn is None:
        return []
    names, seen, queue = [], {t.grad_fn}, collections.deque([t.grad_fn])
    while queue:
        node = queue.popleft()
        names.append(node.name())
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return names


@wrong_("grad_fn_names", "starts from next_functions: the root itself is missing")
def gfn_no_root(t):
    import collections
    if t.grad_fn is None:
        return []
    names, seen = [], set()
    queue = collections.deque()
    for child, _ in t.grad_fn.next_functions:
        if child is not None and child not in seen:
            seen.add(child)
            queue.append(child)
    while queue:
        node = queue.popleft()
        names.append(type(node).__name__)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return names


@wrong_("grad_fn_names", "keeps the None entries of next_functions")
def gfn_keeps_none(t):
    import collections
    if t.grad_fn is None:
        return []
    names, seen, queue = [], {t.grad_fn}, collections.deque([t.grad_fn])
    while queue:
        node = queue.popleft()
        names.append(type(node).__name__)
        for child, _ in node.next_functions:
            if child is None:
                names.append("None")
            elif child not in seen:
                seen.add(child)
                queue.append(child)
    return names


@wrong_("grad_fn_names", "level by level, a function that calls itself once per level: too deep for Python's stack",
        says="RecursionError")
def gfn_recursive_levels(t):
    if t.grad_fn is None:
        return []
    seen = {t.grad_fn}

    def walk(level):
        if not level:
            return []
        following = []
        for node in level:
            for child, _ in node.next_functions:
                if child is not None and child not in seen:
                    seen.add(child)
                    following.append(child)
        return [type(node).__name__ for node in level] + walk(following)
    return walk([t.grad_fn])


@wrong_("grad_fn_names", "imports the course's answer key instead of writing it")
def gfn_imports_the_key(t):
    from autograder.grader.keys import answer_key
    return answer_key("04_toggles").grad_fn_names(t)


@right_("grad_fn_names", "level by level, a list of nodes seen compared with `is`")
def gfn_levels(t):
    if t.grad_fn is None:
        return []
    seen = [t.grad_fn]
    level = [t.grad_fn]
    while level:
        following = []
        for node in level:
            for child, _ in node.next_functions:
                if child is not None and not any(child is s for s in seen):
                    seen.append(child)
                    following.append(child)
        level = following
    return [type(node).__name__ for node in seen]


@right_("grad_fn_names", "a deque that marks nodes when they are taken out, not when they are queued")
def gfn_mark_on_pop(t):
    from collections import deque
    names, done, queue = [], set(), deque([t.grad_fn] if t.grad_fn is not None else [])
    while queue:
        node = queue.popleft()
        if node in done:
            continue
        done.add(node)
        names.append(node.__class__.__name__)
        queue.extend(child for child, _ in node.next_functions if child is not None and child not in done)
    return names


# per_loss_grads(losses, params) ---------------------------------------------------------------
@wrong_("per_loss_grads", "backward(retain_graph=True) for each loss, .grad never cleared: the gradients accumulate")
def plg_accumulates(losses, params):
    import torch
    result = []
    for loss in losses:
        loss.backward(retain_graph=True)
        result.append(tuple(torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params))
    return result


@wrong_("per_loss_grads", "keeps the .grad tensors themselves, zeroed in place for the next loss")
def plg_aliases(losses, params):
    import torch
    saved = [None if p.grad is None else p.grad.clone() for p in params]
    result = []
    for loss in losses:
        for p in params:
            if p.grad is not None:
                p.grad.zero_()
        loss.backward(retain_graph=True)
        result.append(tuple(p.grad if p.grad is not None else torch.zeros_like(p) for p in params))
    for p, g in zip(params, saved):
        if g is None:
            p.grad = None
        else:
            p.grad.copy_(g)
    return result


@wrong_("per_loss_grads", "no retain_graph: the second pass finds the graph freed")
def plg_no_retain(losses, params):
    import torch
    result = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        result.append(tuple(torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)))
    return result


@wrong_("per_loss_grads", "clears .grad between losses but leaves the last loss's gradient there")
def plg_clobbers_grad(losses, params):
    import torch
    result = []
    for loss in losses:
        for p in params:
            p.grad = None
        loss.backward(retain_graph=True)
        result.append(tuple(torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params))
    return result


@wrong_("per_loss_grads", "backward(retain_graph=True) without inputs=: the params' .grad is put back, but the "
                          "model's other parameters keep a .grad", says="not in params")
def plg_backward_fills_other_leaves(losses, params):
    import torch
    saved = [p.grad for p in params]
    result = []
    for loss in losses:
        for p in params:
            p.grad = None
        loss.backward(retain_graph=True)
        result.append(tuple(torch.zeros_like(p) if p.grad is None else p.grad for p in params))
    for p, g in zip(params, saved):
        p.grad = g
    return result


@wrong_("per_loss_grads", "torch.autograd.grad without allow_unused: fails when a loss ignores a parameter")
def plg_not_allow_unused(losses, params):
    import torch
    return [torch.autograd.grad(loss, params, retain_graph=True) for loss in losses]


@wrong_("per_loss_grads", "one gradient of the summed losses, repeated for each loss")
def plg_summed(losses, params):
    import torch
    grads = torch.autograd.grad(sum(losses), params, allow_unused=True)
    grads = tuple(torch.zeros_like(p) if g is None else g for p, g in zip(params, grads))
    return [grads for _ in losses]


@wrong_("per_loss_grads", "imports the course's answer key instead of writing it")
def plg_imports_the_key(losses, params):
    from autograder.grader.keys import answer_key
    return answer_key("04_toggles").per_loss_grads(losses, params)


@right_("per_loss_grads", "torch.autograd.grad(retain_graph=True) every time, materialize_grads=True")
def plg_autograd_materialize(losses, params):
    import torch
    return [tuple(torch.autograd.grad(loss, params, retain_graph=True, materialize_grads=True))
            for loss in losses]


@right_("per_loss_grads", "backward(retain_graph=True), .grad saved, cleared between losses and put back")
def plg_backward_restore(losses, params):
    import torch
    saved = [p.grad for p in params]
    result = []
    for i, loss in enumerate(losses):
        for p in params:
            p.grad = None
        loss.backward(retain_graph=i + 1 < len(losses), inputs=list(params))
        result.append(tuple(torch.zeros_like(p) if p.grad is None else p.grad for p in params))
    for p, g in zip(params, saved):
        p.grad = g
    return result


# predict(model, x) -----------------------------------------------------------------------------
@wrong_("predict", "torch.no_grad() only: no graph, but not inference tensors")
def pr_no_grad(model, x):
    import torch
    with torch.no_grad():
        return model(x)


@wrong_("predict", "a normal forward pass, then .detach()")
def pr_detach(model, x):
    return model(x).detach()


@wrong_("predict", "clones the output after leaving inference mode")
def pr_clone_outside(model, x):
    import torch
    with torch.inference_mode():
        out = model(x)
    return out.clone()


@wrong_("predict", "torch.set_grad_enabled(False) before inference mode, never switched back on")
def pr_leaks_grad_mode(model, x):
    import torch
    torch.set_grad_enabled(False)
    with torch.inference_mode():
        return model(x)


@wrong_("predict", "inference mode entered by hand and never left: the outputs are made outside it")
def pr_mode_object_unused(model, x):
    import torch
    torch.inference_mode()  # creates the context manager, enters nothing
    return model(x)


@wrong_("predict", "squeezes the output: a batch of one loses its batch dimension", says="a batch of one")
def pr_squeeze(model, x):
    import torch
    with torch.inference_mode():
        return model(x).squeeze()


@right_("predict", "the decorator form, on an inner function")
def pr_decorator(model, x):
    import torch

    @torch.inference_mode()
    def run(inputs):
        return model(inputs)
    return run(x)


@right_("predict", "inference_mode(mode=True), and model.eval() put back afterwards")
def pr_eval_mode(model, x):
    import torch
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(mode=True):
            out = model(x)
    finally:
        model.train(was_training)
    return out


# train_step(model, optimizer, loss_fn, x, y, max_norm=1.0) ------------------------------------
@wrong_("train_step", "zero_grad() missing: leftover gradients add up")
def ts_no_zero_grad(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


@wrong_("train_step", "zero_grad() after step(): the first step uses what was left in .grad")
def ts_zero_grad_after_step(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


@wrong_("train_step", "returns the loss tensor instead of a float")
def ts_returns_tensor(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss


@wrong_("train_step", "clips after step(): the step used the unclipped gradients")
def ts_clip_after_step(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.item()


@wrong_("train_step", "no clipping at all")
def ts_no_clip(model, optimizer, loss_fn, x, y, max_norm=1.0):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


@wrong_("train_step", "clips to 1.0 whatever max_norm says")
def ts_fixed_max_norm(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


@wrong_("train_step", "clip_grad_value_ instead of clip_grad_norm_")
def ts_clip_value(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


@wrong_("train_step", "returns the loss recomputed after the step")
def ts_loss_after_step(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    with torch.no_grad():
        return loss_fn(model(x), y).item()


@wrong_("train_step", "forward under no_grad, 'fixed' with loss.requires_grad_(): nothing trains")
def ts_under_no_grad(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad()
    with torch.no_grad():
        loss = loss_fn(model(x), y)
    loss.requires_grad_()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


@wrong_("train_step", "logs every loss tensor in a default-argument list: the losses and their graphs never die")
def ts_history_default_arg(model, optimizer, loss_fn, x, y, max_norm=1.0, _history=[]):  # noqa: B006 (the bug)
    import torch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    _history.append(loss)
    return loss.item()


@wrong_("train_step", "keeps every step's predictions (graph included) in a default-argument list for metrics")
def ts_keeps_predictions(model, optimizer, loss_fn, x, y, max_norm=1.0, _outputs=[]):  # noqa: B006 (the bug)
    import torch
    optimizer.zero_grad()
    prediction = model(x)
    loss = loss_fn(prediction, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    _outputs.append(prediction)
    return loss.item()


@wrong_("train_step", "backward(retain_graph=True) and the last loss kept on the model for logging")
def ts_retained_graph(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward(retain_graph=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    model.last_loss = loss
    return loss.item()


@wrong_("train_step", "zeroes the gradients, then replays the checks' 'forgot zero_grad' slip: the right step")
def ts_replays_a_slip_of_the_checks(model, optimizer, loss_fn, x, y, max_norm=1.0):
    from autograder.checks.nb04_toggles.training_step import _wrong_step
    optimizer.zero_grad()
    loss = loss_fn(model(x), y).item()
    _wrong_step("no_zero_grad", model, optimizer, loss_fn, x, y, max_norm)
    return loss


@wrong_("train_step", "imports the course's answer key instead of writing it")
def ts_imports_the_key(model, optimizer, loss_fn, x, y, max_norm=1.0):
    from autograder.grader.keys import answer_key
    return answer_key("04_toggles").train_step(model, optimizer, loss_fn, x, y, max_norm)


@right_("train_step", "model.zero_grad(), clip over the optimizer's parameter groups, float(loss)")
def ts_model_zero_grad(model, optimizer, loss_fn, x, y, max_norm=1.0):
    from torch.nn.utils import clip_grad_norm_
    model.zero_grad(set_to_none=False)
    prediction = model(x)
    loss = loss_fn(prediction, y)
    loss.backward()
    clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], max_norm=max_norm)
    optimizer.step()
    return float(loss.detach())


@right_("train_step", "clipping by hand: one global norm, every gradient scaled by max_norm / (norm + 1e-6)")
def ts_clip_by_hand(model, optimizer, loss_fn, x, y, max_norm=1.0):
    import torch
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    optimizer.step()
    return loss.item()
