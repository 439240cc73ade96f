"""Answer keys of notebook 08: references that are themselves answers (see autograder/grader/keys.py).

Hidden tests load this file with `answer_key("08_higher_order")` and pass these functions into the
checks of `autograder.checks.nb08_higher_order`; it is never packaged and never released (only notebooks
are). Written apart from the notebook's solutions, so that a slip in one is caught by the other.
"""
import torch

from autograder.grader.keys import answer


@answer
def gradient_penalty(critic, real, fake, alpha):
    """((|grad_x critic(x_hat)|_2 - 1)^2).mean() at x_hat = alpha real + (1 - alpha) fake, with a graph."""
    alpha = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    if alpha.dim() > 0:  # (N,) or (N, 1, ...): one weight per example, broadcast over the rest
        alpha = alpha.reshape(-1, *[1] * (real.dim() - 1))
    point = (alpha * real + (1 - alpha) * fake).detach().requires_grad_(True)
    scores = critic(point)
    (slope,) = torch.autograd.grad(scores, point, grad_outputs=torch.ones_like(scores), create_graph=True)
    norms = slope.reshape(slope.shape[0], -1).pow(2).sum(dim=1).sqrt()
    return (norms - 1).pow(2).mean()


@answer
def tbptt_backward(cell, xs, targets, h0, k, loss_fn):
    """Truncated BPTT: one backward per k-step segment, the hidden state detached between segments."""
    h, total, steps = h0, 0.0, len(xs)
    for start in range(0, steps, k):
        terms = []
        for t in range(start, min(start + k, steps)):
            h = cell(xs[t], h)
            terms.append(loss_fn(h, targets[t]))
        loss = torch.stack(terms).sum()
        loss.backward()
        total += loss.item()
        h = h.detach()
    return total
