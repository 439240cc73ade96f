"""Notebook 05: the bugs learners write in loss scaling, and correct answers written differently.

`AltScaler` is a correct `DynamicLossScaler` written independently of the reference solution: it
counts the clean steps since the last change of scale and grows when that count is a multiple of
`growth_interval`, unscales by multiplying with the reciprocal, and finds inf/NaN with `abs().max()`.
Every wrong scaler below but the first overrides exactly one method of it, so each entry shows one
bug and nothing else. The first wrong entry is a plain, self-contained class on purpose: the
nbgrader end-to-end test pastes the source of the first wrong entry of the first graded name in
sorted order ("DynamicLossScaler") into a submission, renamed by its `class` line.
"""
import functools

from mutants import right, wrong

NB = "05_loss_scaling"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# DynamicLossScaler(init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000) --
@wrong_("DynamicLossScaler", "grows the scale after every clean step, ignoring growth_interval (self-contained)")
class ScalerGrowingEveryStep:
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.current, self.growth_factor, self.backoff_factor = float(init_scale), growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.found_inf = None

    def scale(self, loss):
        return loss * self.current

    def unscale_(self, optimizer):
        import torch
        found = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        found = found or not bool(torch.isfinite(p.grad).all())
                        p.grad /= self.current
        self.found_inf = found

    def step(self, optimizer):
        if self.found_inf is None:
            self.unscale_(optimizer)
        if self.found_inf:
            return False
        optimizer.step()
        return True

    def update(self):
        if self.found_inf:
            self.current *= self.backoff_factor
        else:
            self.current *= self.growth_factor  # the bug: no count of clean steps
        self.found_inf = None

    def get_scale(self):
        return self.current


class AltScaler:
    """A correct dynamic loss scaler, written differently from the reference solution."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self._s = float(init_scale)
        self._up, self._down, self._every = growth_factor, backoff_factor, growth_interval
        self._streak = 0          # clean steps since the scale last changed
        self._state = "ready"     # "ready" -> "unscaled" -> "stepped"
        self._bad = False

    def _grads(self, optimizer):
        return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]

    def _non_finite(self, grads):
        import torch
        return any(not torch.isfinite(g.abs().max()) for g in grads if g.numel())

    def scale(self, loss):
        return self._s * loss

    def unscale_(self, optimizer):
        import torch
        grads = self._grads(optimizer)
        self._bad = self._non_finite(grads)
        with torch.no_grad():
            for g in grads:
                g.mul_(1.0 / self._s)
        self._state = "unscaled"

    def step(self, optimizer):
        if self._state == "ready":
            self.unscale_(optimizer)
        self._state = "stepped"
        if self._bad:
            return False
        optimizer.step()
        return True

    def update(self):
        if self._bad:
            self._s *= self._down
            self._streak = 0
        else:
            self._streak += 1
            if self._streak % self._every == 0:
                self._s *= self._up
                self._streak = 0
        self._state, self._bad = "ready", False

    def get_scale(self):
        return self._s


right_("DynamicLossScaler", "clean streak with %, unscale by the reciprocal, abs().max() check")(AltScaler)


@right_("DynamicLossScaler", "float32 tensor state and torch.where, like GradScaler's kernel, written by hand")
class TensorStateScaler:
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        import torch
        self.scale_t = torch.tensor(float(init_scale), dtype=torch.float32)
        self.tracker = torch.tensor(0, dtype=torch.int32)
        self.factors = (growth_factor, backoff_factor, growth_interval)
        self.found = None

    def scale(self, loss):
        if self.scale_t.device != loss.device:
            self.scale_t, self.tracker = self.scale_t.to(loss.device), self.tracker.to(loss.device)
        return loss * self.scale_t

    def unscale_(self, optimizer):
        import torch
        if self.found is not None:
            return  # already unscaled in this step: a second call does nothing
        inv = self.scale_t.double().reciprocal().float()
        found = torch.zeros((), device=self.scale_t.device)
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    found = torch.maximum(found, (~torch.isfinite(p.grad)).any().float().to(found.device))
                    p.grad.mul_(inv.to(p.grad.device))
        self.found = found

    def step(self, optimizer):
        if self.found is None:
            self.unscale_(optimizer)
        if bool(self.found):
            return False
        optimizer.step()
        return True

    def update(self):
        import torch
        growth, backoff, interval = self.factors
        bad = self.found.bool()
        streak = torch.where(bad, torch.zeros_like(self.tracker), self.tracker + 1)
        grow = streak == interval
        self.scale_t = torch.where(bad, self.scale_t * backoff, torch.where(grow, self.scale_t * growth, self.scale_t))
        self.tracker = torch.where(grow, torch.zeros_like(streak), streak)
        self.found = None

    def get_scale(self):
        return float(self.scale_t.item())


@right_("DynamicLossScaler", "the inf/NaN check happens in step(), on the unscaled gradients")
class CheckInStep(AltScaler):
    def unscale_(self, optimizer):
        import torch
        with torch.no_grad():
            for g in self._grads(optimizer):
                g.div_(self._s)
        self._state = "unscaled"

    def step(self, optimizer):
        if self._state == "ready":
            self.unscale_(optimizer)
        self._state = "stepped"
        self._bad = self._non_finite(self._grads(optimizer))
        if self._bad:
            return False
        optimizer.step()
        return True


@wrong_("DynamicLossScaler", "does not reset the count of clean steps on overflow")
class ScalerKeepsCountOnOverflow(AltScaler):
    def update(self):
        if self._bad:
            self._s *= self._down
        else:
            self._streak += 1
            if self._streak % self._every == 0:
                self._s *= self._up
                self._streak = 0
        self._state, self._bad = "ready", False


@wrong_("DynamicLossScaler", "counts skipped steps towards growth too (growth tracked across skipped steps)")
class ScalerCountsSkippedSteps(AltScaler):
    def update(self):
        self._streak += 1
        if self._bad:
            self._s *= self._down
        elif self._streak % self._every == 0:
            self._s *= self._up
        self._state, self._bad = "ready", False


@wrong_("DynamicLossScaler", "checks only for inf (torch.isinf), not for NaN")
class ScalerMissesNaN(AltScaler):
    def _non_finite(self, grads):
        import torch
        return any(bool(torch.isinf(g).any()) for g in grads)


@wrong_("DynamicLossScaler", "checks only for NaN (g != g), not for inf")
class ScalerMissesInf(AltScaler):
    def _non_finite(self, grads):
        return any(bool((g != g).any()) for g in grads)


@wrong_("DynamicLossScaler", "step() unscales again after an explicit unscale_() (unscaling twice)")
class ScalerUnscalesTwice(AltScaler):
    def step(self, optimizer):
        self.unscale_(optimizer)
        self._state = "stepped"
        if self._bad:
            return False
        optimizer.step()
        return True


@wrong_("DynamicLossScaler", "steps on overflow: notes the inf, still calls optimizer.step()")
class ScalerStepsOnOverflow(AltScaler):
    def step(self, optimizer):
        if self._state == "ready":
            self.unscale_(optimizer)
        self._state = "stepped"
        optimizer.step()
        return not self._bad


@wrong_("DynamicLossScaler", "backs off by a hard-coded 0.5 instead of backoff_factor")
class ScalerFixedBackoff(AltScaler):
    def update(self):
        self._down = 0.5
        super().update()


@wrong_("DynamicLossScaler", "backs off by dividing by growth_factor instead of multiplying by backoff_factor")
class ScalerBacksOffByGrowth(AltScaler):
    def update(self):
        if self._bad:
            self._s /= self._up
            self._streak = 0
            self._state, self._bad = "ready", False
        else:
            super().update()


@wrong_("DynamicLossScaler", "unscale_ multiplies the gradients by the scale instead of dividing")
class ScalerUnscalesByMultiplying(AltScaler):
    def unscale_(self, optimizer):
        import torch
        grads = self._grads(optimizer)
        self._bad = self._non_finite(grads)
        with torch.no_grad():
            for g in grads:
                g.mul_(self._s)
        self._state = "unscaled"


@wrong_("DynamicLossScaler", "scale applied after backward: scale() returns the loss unchanged")
class ScalerScalesAfterBackward(AltScaler):
    def scale(self, loss):
        return loss

    def unscale_(self, optimizer):
        import torch
        grads = self._grads(optimizer)
        with torch.no_grad():
            for g in grads:
                g.mul_(self._s)  # "scale" the gradients now: too late, and then unscale them again
        super().unscale_(optimizer)


@wrong_("DynamicLossScaler", "grows one clean step late: after growth_interval + 1 steps")
class ScalerGrowsLate(AltScaler):
    def update(self):
        if self._bad:
            self._s *= self._down
            self._streak = 0
        else:
            if self._streak == self._every:
                self._s *= self._up
                self._streak = 0
            self._streak += 1
        self._state, self._bad = "ready", False


@wrong_("DynamicLossScaler", "does not restart the count after growing: grows at every step after the first interval")
class ScalerNoRestartAfterGrowth(AltScaler):
    def update(self):
        if self._bad:
            self._s *= self._down
            self._streak = 0
        else:
            self._streak += 1
            if self._streak >= self._every:
                self._s *= self._up
        self._state, self._bad = "ready", False


@wrong_("DynamicLossScaler", "never clears the overflow flag: every step after the first overflow is skipped")
class ScalerStickyOverflow(AltScaler):
    def unscale_(self, optimizer):
        import torch
        grads = self._grads(optimizer)
        self._bad = self._bad or self._non_finite(grads)
        with torch.no_grad():
            for g in grads:
                g.mul_(1.0 / self._s)
        self._state = "unscaled"

    def update(self):
        bad = self._bad
        super().update()
        self._bad = bad


@wrong_("DynamicLossScaler", "looks for +inf and NaN (g == inf, g != g): a -inf gradient slips through",
        says="-inf entry")
class ScalerMissesNegativeInf(AltScaler):
    def _non_finite(self, grads):
        return any(bool(((g == float("inf")) | (g != g)).any()) for g in grads)


@wrong_("DynamicLossScaler", "checks the scaled loss for inf/NaN instead of the gradients")
class ScalerChecksTheLoss(AltScaler):
    def scale(self, loss):
        import torch
        scaled = self._s * loss
        self._loss_bad = not bool(torch.isfinite(scaled))
        return scaled

    def _non_finite(self, grads):
        return self._loss_bad


@wrong_("DynamicLossScaler", "checks only the first parameter group")
class ScalerFirstGroupOnly(AltScaler):
    def unscale_(self, optimizer):
        import torch
        first = [p.grad for p in optimizer.param_groups[0]["params"] if p.grad is not None]
        self._bad = self._non_finite(first)  # the bug: the other groups are unscaled, never checked
        with torch.no_grad():
            for g in self._grads(optimizer):
                g.mul_(1.0 / self._s)
        self._state = "unscaled"


@wrong_("DynamicLossScaler", "checks isfinite(grad.sum()): huge finite gradients overflow the sum")
class ScalerChecksTheSum(AltScaler):
    def _non_finite(self, grads):
        import torch
        return any(not bool(torch.isfinite(g.sum())) for g in grads)


@wrong_("DynamicLossScaler", "keeps the scale in an fp16 tensor: 2**16 is inf in fp16")
class ScalerInFp16(AltScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        import torch
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval)
        self._s = torch.tensor(self._s, dtype=torch.float16)

    def get_scale(self):
        return float(self._s)


@wrong_("DynamicLossScaler", "a different default: growth_interval=1000")
class ScalerOtherDefault(AltScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=1000):
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval)


@wrong_("DynamicLossScaler", "get_scale() returns a tensor, not a Python float")
class ScalerScaleAsTensor(AltScaler):
    def get_scale(self):
        import torch
        return torch.tensor(self._s)


@wrong_("DynamicLossScaler", "step() returns None (like GradScaler's), not whether it stepped")
class ScalerStepReturnsNone(AltScaler):
    def step(self, optimizer):
        super().step(optimizer)


@wrong_("DynamicLossScaler", "unscale_ forgets that a parameter's .grad may be None")
class ScalerNoneGrads(AltScaler):
    def _grads(self, optimizer):
        return [p.grad for group in optimizer.param_groups for p in group["params"]]


def _gradscaler_subclass():
    """Built in a function so that the import of its base class stays inside the entry."""
    import torch

    from autograder.learner.device import get_device

    class ScalerSubclassingGradScaler(torch.amp.GradScaler):
        def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
            super().__init__(get_device().type, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval)

        def step(self, optimizer):
            counted = []
            handle = optimizer.register_step_post_hook(lambda *args: counted.append(1))
            super().step(optimizer)
            handle.remove()
            return bool(counted)

    return ScalerSubclassingGradScaler


wrong_("DynamicLossScaler", "subclasses torch.amp.GradScaler (step() returns whether it stepped)")(
    _gradscaler_subclass())


@wrong_("DynamicLossScaler", "wraps a torch.amp.GradScaler and forwards every call")
class ScalerWrappingGradScaler:
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        from torch.amp import GradScaler

        from autograder.learner.device import get_device
        self.inner = GradScaler(get_device().type, init_scale=init_scale, growth_factor=growth_factor,
                                backoff_factor=backoff_factor, growth_interval=growth_interval)
        self.calls = 0

    def scale(self, loss):
        return self.inner.scale(loss)

    def unscale_(self, optimizer):
        self.inner.unscale_(optimizer)

    def step(self, optimizer):
        counted = []
        handle = optimizer.register_step_post_hook(lambda *args: counted.append(1))
        self.inner.step(optimizer)
        handle.remove()
        return bool(counted)

    def update(self):
        self.inner.update()

    def get_scale(self):
        return self.inner.get_scale()


@wrong_("DynamicLossScaler", "calls torch._amp_update_scale_, GradScaler's kernel, in update()")
class ScalerUsingTheKernel(AltScaler):
    def update(self):
        import torch
        scale = torch.tensor(self._s, dtype=torch.float32)
        tracker = torch.tensor(self._streak, dtype=torch.int32)
        torch._amp_update_scale_(scale, tracker, torch.tensor(float(self._bad)), self._up, self._down, self._every)
        self._s, self._streak = scale.item(), int(tracker)
        self._state, self._bad = "ready", False



# scaled_fp16_grads(model, loss_fn, x, y, scale) -----------------------------------------------------
@wrong_("scaled_fp16_grads", "ignores scale: a plain fp16 backward pass")
def fp16_grads_ignoring_scale(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    loss_fn(half(x.half()).float(), y).backward()
    return [p.grad.float() for p in half.parameters()]


@wrong_("scaled_fp16_grads", "scales the loss but forgets to unscale the gradients")
def fp16_grads_not_unscaled(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [p.grad.float() for p in half.parameters()]


@wrong_("scaled_fp16_grads", "unscales in fp16 (divides before .float()): the gradients underflow again")
def fp16_grads_unscaled_in_fp16(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [(p.grad / scale).float() for p in half.parameters()]


@wrong_("scaled_fp16_grads", "scale applied after backward: gradients multiplied and divided once they exist")
def fp16_grads_scaled_after_backward(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    loss_fn(half(x.half()).float(), y).backward()
    return [(p.grad.float() * scale) / scale for p in half.parameters()]


@wrong_("scaled_fp16_grads", "multiplies by the scale when unscaling")
def fp16_grads_multiplied(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [p.grad.float() * scale for p in half.parameters()]


@wrong_("scaled_fp16_grads", "divides by the scale twice")
def fp16_grads_divided_twice(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [p.grad.float() / scale / scale for p in half.parameters()]


@wrong_("scaled_fp16_grads", "converts the caller's model in place (model.half(), then .float() back)")
def fp16_grads_in_place(model, loss_fn, x, y, scale):
    model.half()
    model.zero_grad(set_to_none=True)
    (loss_fn(model(x.half()).float(), y) * scale).backward()
    grads = [p.grad.float() / scale for p in model.parameters()]
    model.float()
    model.zero_grad(set_to_none=True)
    return grads


@wrong_("scaled_fp16_grads", "copy.copy (shallow) instead of deepcopy: the caller's parameters become fp16")
def fp16_grads_shallow_copy(model, loss_fn, x, y, scale):
    import copy
    half = copy.copy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [p.grad.float() / scale for p in half.parameters()]


@wrong_("scaled_fp16_grads", "stays in float32: no fp16 copy, so nothing underflows even with scale 1")
def fp16_grads_in_fp32(model, loss_fn, x, y, scale):
    import copy
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    (loss_fn(twin(x), y) * scale).backward()
    return [p.grad / scale for p in twin.parameters()]


@wrong_("scaled_fp16_grads", "model.to(torch.float16) as if it made a copy: for a module, .to() works in place")
def fp16_grads_module_to(model, loss_fn, x, y, scale):
    import torch
    half = model.to(torch.float16)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    grads = [p.grad.float() / scale for p in half.parameters()]
    for p in half.parameters():
        p.grad = None
    return grads


@wrong_("scaled_fp16_grads", "casts y to fp16 unconditionally: integer class labels break")
def fp16_grads_half_labels(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y.half().float()) * scale).backward()
    return [p.grad.float() / scale for p in half.parameters()]


@wrong_("scaled_fp16_grads", "returns the fp16 gradients (no .float())")
def fp16_grads_left_in_fp16(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return [p.grad.float().div(scale).half() for p in half.parameters()]


@wrong_("scaled_fp16_grads", "returns a dict {name: gradient} instead of a list")
def fp16_grads_as_dict(model, loss_fn, x, y, scale):
    import copy
    half = copy.deepcopy(model).half()
    half.zero_grad(set_to_none=True)
    (loss_fn(half(x.half()).float(), y) * scale).backward()
    return {name: p.grad.float() / scale for name, p in half.named_parameters()}


@wrong_("scaled_fp16_grads", "imports the course's answer key instead of writing it")
def fp16_grads_imports_the_key(model, loss_fn, x, y, scale):
    from autograder.grader.keys import answer_key
    return answer_key("05_loss_scaling").scaled_fp16_grads(model, loss_fn, x, y, scale)


@right_("scaled_fp16_grads", "loss computed in fp16 (y cast when it is floating point)")
def fp16_grads_loss_in_fp16(model, loss_fn, x, y, scale):
    import copy

    import torch
    half = copy.deepcopy(model).half()
    for p in half.parameters():
        p.grad = None
    target = y.half() if torch.is_floating_point(y) else y
    (loss_fn(half(x.half()), target) * scale).backward()
    return [p.grad.float() / scale for p in half.parameters()]


@right_("scaled_fp16_grads", "no module copy: torch.func.functional_call with fp16 parameters, autograd.grad")
def fp16_grads_functional(model, loss_fn, x, y, scale):
    import torch
    params = {name: p.detach().half().requires_grad_() for name, p in model.named_parameters()}
    out = torch.func.functional_call(model, params, (x.half(),))
    grads = torch.autograd.grad(loss_fn(out.float(), y) * scale, list(params.values()))
    inverse = 1.0 / scale
    return [g.float().mul_(inverse) for g in grads]


# underflow_fraction(t, dtype=torch.float16) ----------------------------------------------------------
@wrong_("underflow_fraction", "divides by every entry, zeros included, not by the non-zero ones")
def underflow_over_all_entries(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    if t.numel() == 0:
        return 0.0
    return int(((t.to(dtype) == 0) & (t != 0)).sum()) / t.numel()


@wrong_("underflow_fraction", "counts subnormals as underflow (threshold at finfo.tiny, the smallest normal)")
def underflow_below_tiny(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    nonzero = t != 0
    count = int(nonzero.sum())
    return int(((t.abs() < torch.finfo(dtype).tiny) & nonzero).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "threshold at the smallest subnormal: ignores rounding to nearest")
def underflow_below_smallest_subnormal(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    info = torch.finfo(dtype)
    nonzero = t != 0
    count = int(nonzero.sum())
    return int(((t.abs() < info.tiny * info.eps) & nonzero).sum()) / count if count else 0.0


@wrong_("underflow_fraction",
        "threshold at half the smallest subnormal with <: a value exactly there (a tie) becomes 0")
def underflow_strict_half(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    info = torch.finfo(dtype)
    nonzero = t != 0
    count = int(nonzero.sum())
    return int(((t.abs() < info.tiny * info.eps / 2) & nonzero).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "uses eps (a relative precision) as the underflow threshold")
def underflow_below_eps(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    nonzero = t != 0
    count = int(nonzero.sum())
    return int(((t.abs() < torch.finfo(dtype).eps) & nonzero).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "ignores dtype: always casts to fp16")
def underflow_always_fp16(t, dtype=None):
    nonzero = t != 0
    count = int(nonzero.sum())
    return int(((t.half() == 0) & nonzero).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "returns a 0-d tensor, not a Python float")
def underflow_as_tensor(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    nonzero = t != 0
    if not nonzero.any():
        return torch.tensor(0.0)
    return ((t.to(dtype) == 0) & nonzero).sum() / nonzero.sum()


@wrong_("underflow_fraction", "the mean over no entries: NaN for an all-zero tensor", says="special points")
def underflow_nan_when_all_zero(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    kept = t[t != 0]
    return (kept.to(dtype) == 0).float().mean().item()


@wrong_("underflow_fraction", "integer division by the count: ZeroDivisionError for an all-zero tensor",
        says="special points")
def underflow_divides_by_zero(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    nonzero = t != 0
    return int(((t.to(dtype) == 0) & nonzero).sum()) / int(nonzero.sum())


@wrong_("underflow_fraction", "counts the input's own zeros as underflow")
def underflow_counts_input_zeros(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    count = int((t != 0).sum())
    return int((t.to(dtype) == 0).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "only positive entries: tiny negatives are not counted")
def underflow_positive_only(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    positive = t > 0
    count = int(positive.sum())
    return int(((t.to(dtype) == 0) & positive).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "counts every entry the cast changes, not only those that become 0")
def underflow_any_rounding(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    nonzero = t != 0
    count = int(nonzero.sum())
    return int(((t.to(dtype).to(t.dtype) != t) & nonzero).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "flattens with t.view(-1): fails on a slice of a larger tensor", says="non-contiguous t")
def underflow_view_flat(t, dtype=None):
    import torch
    flat = t.view(-1)
    kept = flat[flat != 0]
    return int((kept.to(dtype or torch.float16) == 0).sum()) / kept.numel() if kept.numel() else 0.0


@wrong_("underflow_fraction", "takes magnitudes in place (t.abs_(), as the sign does not matter): writes into t",
        says="expanded t")
def underflow_abs_in_place(t, dtype=None):
    import torch
    magnitude = t.abs_()
    nonzero = magnitude > 0
    count = int(nonzero.sum())
    return int(((magnitude.to(dtype or torch.float16) == 0) & nonzero).sum()) / count if count else 0.0


@wrong_("underflow_fraction", "imports the course's answer key instead of writing it")
def uf_imports_the_key(t, dtype=None):
    import torch

    from autograder.grader.keys import answer_key
    return answer_key("05_loss_scaling").underflow_fraction(t, torch.float16 if dtype is None else dtype)


@right_("underflow_fraction", "threshold at half the smallest subnormal (ties round to even, to 0), from finfo")
def underflow_by_threshold(t, dtype=None):
    import torch
    dtype = dtype or torch.float16
    info = torch.finfo(dtype)
    magnitude = t.abs()
    nonzero = int(torch.count_nonzero(t))
    if nonzero == 0:
        return 0.0
    lost = int(torch.count_nonzero((magnitude > 0) & (magnitude <= info.tiny * info.eps / 2)))
    return lost / nonzero


@right_("underflow_fraction", "select the non-zero entries, mean in float32, 0.0 when there are none")
def underflow_by_mean(t, dtype=None):
    import torch
    kept = t[t != 0]
    if kept.numel() == 0:
        return 0.0
    return float((kept.to(dtype or torch.float16) == 0).float().mean())
