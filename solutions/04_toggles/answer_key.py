"""Answer key of notebook 04: the references that are themselves answers, for the hidden tests.

Never released (only notebooks are) and never packaged; the hidden tests load it with
`autograder.grader.keys.answer_key("04_toggles")` and pass these functions into the checks of
`autograder.checks.nb04_toggles`. Each refuses to run inside a student's call (`@answer`).
"""
import collections

import torch
import torch.nn.functional as F

from autograder.grader.keys import answer


@answer
def grad_fn_names(t):
    """Class names of the nodes reachable from t.grad_fn, breadth first, each node once ([] if none)."""
    root = t.grad_fn
    if root is None:
        return []
    found, queued, waiting = [], {root}, collections.deque([root])
    while waiting:
        node = waiting.popleft()
        found.append(type(node).__name__)
        for child, _ in node.next_functions:
            if child is not None and child not in queued:
                queued.add(child)
                waiting.append(child)
    return found


@answer
def distill_loss(student_logits, teacher_logits, T=2.0):
    """T^2 * KL(softmax(teacher/T) || softmax(student/T)), summed over classes, mean over the batch."""
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    log_p_teacher = F.log_softmax(teacher_logits.detach() / T, dim=-1)
    return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True) * T ** 2


@answer
def per_loss_grads(losses, params):
    """[tuple(d loss / d p for p in params) for loss in losses]: zeros where a loss ignores p, .grad untouched."""
    result = []
    for i, loss in enumerate(losses):
        grads = torch.autograd.grad(loss, params, retain_graph=i < len(losses) - 1, allow_unused=True)
        result.append(tuple(torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)))
    return result


@answer
def train_step(model, optimizer, loss_fn, x, y, max_norm=1.0):
    """zero_grad, forward, backward, clip the gradient norm to max_norm, step; the loss as a float."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
