"""Notebook 06: the bugs learners write when they count saved tensors and build checkpointing,
and correct answers written differently from the solution."""
import functools

from mutants import right, wrong

NB = "06_checkpointing"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# best_segments(n_blocks) ------------------------------------------------------------------------
# (first entry: a plain function, pasted into a submission by the nbgrader end-to-end test)
@wrong_("best_segments", "√n rounded up: more segments than needed for small n (8 -> 3, 10 -> 4, 17 -> 5)")
def bs_ceil_sqrt(n_blocks):
    import math
    return math.ceil(math.sqrt(n_blocks))


@wrong_("best_segments", "√n rounded to the nearest integer: 8 -> 3, whose last segment holds 4 blocks")
def bs_round_sqrt(n_blocks):
    return round(n_blocks ** 0.5)


@wrong_("best_segments", "√n rounded down: 18 -> 4, peak 9 where 3 or 6 segments reach 8")
def bs_floor_sqrt(n_blocks):
    import math
    return math.isqrt(n_blocks)


@wrong_("best_segments", "a checkpoint per block: returns n")
def bs_every_block(n_blocks):
    return n_blocks


@wrong_("best_segments", "no checkpointing: returns 1")
def bs_one(n_blocks):
    return 1


@wrong_("best_segments", "minimises Chen's smooth cost k + n/k (as if every segment were checkpointed)")
def bs_smooth_cost(n_blocks):
    return min(range(1, n_blocks + 1), key=lambda k: k + n_blocks / k)


@wrong_("best_segments", "forgets the remainder: cost (k - 1) + n // k, as if the last segment had n // k blocks")
def bs_no_remainder(n_blocks):
    return min(range(1, n_blocks + 1), key=lambda k: (k - 1) + n_blocks // k)


@wrong_("best_segments", "returns √n as a float")
def bs_float(n_blocks):
    import math
    return float(math.floor(math.sqrt(n_blocks)))


@wrong_("best_segments", "searches k in range(1, n_blocks), leaving out n: nothing to search for one block",
        says="n_blocks = 1")
def bs_range_without_n(n_blocks):
    return min(range(1, n_blocks), key=lambda k: (k - 1) + n_blocks - (k - 1) * (n_blocks // k))


@wrong_("best_segments", "starts at 2 segments (\"1 is no checkpointing\"): nothing to search for one block",
        says="n_blocks = 1")
def bs_from_two(n_blocks):
    return min(range(2, n_blocks + 1), key=lambda k: (k - 1) + n_blocks - (k - 1) * (n_blocks // k))


@right_("best_segments", "measures the peak with torch's checkpoint_sequential over tanh blocks")
def bs_measured(n_blocks):
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    def peak(k):
        held = {"live": 0, "peak": 0}

        def pack(t):
            held["live"] += t.numel()
            held["peak"] = max(held["peak"], held["live"])
            return t.detach()

        def unpack(t):
            return t

        blocks = [torch.nn.Tanh() for _ in range(n_blocks)]
        x = torch.ones(8, requires_grad=True)
        import weakref

        def counted_pack(t):
            alias = pack(t)
            weakref.finalize(alias, lambda n=t.numel(): held.__setitem__("live", held["live"] - n))  # noqa: B008
            return alias

        with torch.autograd.graph.saved_tensors_hooks(counted_pack, unpack):
            checkpoint_sequential(blocks, k, x, use_reentrant=True).sum().backward()
        return held["peak"]

    peaks = {k: peak(k) for k in range(1, n_blocks + 1)}
    return min(peaks, key=peaks.get)


@wrong_("best_segments", "imports the course's answer key instead of writing it")
def bs_imports_the_key(n_blocks):
    from autograder.grader.keys import answer_key
    peaks = answer_key("06_checkpointing").segment_peaks(n_blocks)
    return min(peaks, key=peaks.get)


@right_("best_segments", "the exact count, the most segments among ties")
def bs_largest_minimiser(n_blocks):
    best, best_cost = 1, None
    for k in range(1, n_blocks + 1):
        last = n_blocks - (k - 1) * (n_blocks // k)
        cost = k - 1 + last
        if best_cost is None or cost <= best_cost:
            best, best_cost = k, cost
    return best


# saved_bytes(fn, *inputs) ---------------------------------------------------------------------------
@wrong_("saved_bytes", "counts every saved reference: a storage saved twice counts twice")
def sb_no_dedupe(fn, *inputs):
    import torch
    total = [0]

    def pack(t):
        total[0] += t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return total[0]


@wrong_("saved_bytes", "numel * element_size of the saved view instead of its storage")
def sb_view_bytes(fn, *inputs):
    import torch
    sizes = {}

    def pack(t):
        sizes[(t.device, t.untyped_storage().data_ptr())] = t.numel() * t.element_size()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(sizes.values())


@wrong_("saved_bytes", "assumes 4 bytes per element whatever the dtype")
def sb_four_bytes(fn, *inputs):
    import torch
    sizes = {}

    def pack(t):
        sizes[(t.device, t.untyped_storage().data_ptr())] = 4 * t.untyped_storage().nbytes() // t.element_size()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(sizes.values())


@wrong_("saved_bytes", "returns the number of saved tensors, not bytes")
def sb_count(fn, *inputs):
    import torch
    seen = set()

    def pack(t):
        seen.add((t.device, t.untyped_storage().data_ptr()))
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return len(seen)


@wrong_("saved_bytes", "runs fn under torch.no_grad(): nothing is saved")
def sb_no_grad(fn, *inputs):
    import torch
    sizes = {}

    def pack(t):
        sizes[(t.device, t.untyped_storage().data_ptr())] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(sizes.values())


@wrong_("saved_bytes", "counts fn's inputs and outputs instead of what autograd saves")
def sb_inputs_outputs(fn, *inputs):
    import torch
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    return sum(t.nbytes for t in (*inputs, *outs) if isinstance(t, torch.Tensor))


@wrong_("saved_bytes", "tells storages apart by id(tensor): two views of one storage count twice")
def sb_by_id(fn, *inputs):
    import torch
    sizes, keep = {}, []

    def pack(t):
        keep.append(t)
        sizes[id(t)] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(sizes.values())


@wrong_("saved_bytes", "counts floating-point tensors only: integer indices and targets are missed")
def sb_float_only(fn, *inputs):
    import torch
    sizes = {}

    def pack(t):
        if t.is_floating_point():
            sizes[(t.device, t.untyped_storage().data_ptr())] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(sizes.values())


@wrong_("saved_bytes", "calls the course's SavedTensorLedger instead of counting: the counter this exercise builds")
def sb_ledger(fn, *inputs):
    from autograder.learner.memory import SavedTensorLedger
    with SavedTensorLedger() as ledger:
        fn(*inputs)
    return ledger.total_bytes


@wrong_("saved_bytes", "imports the course's answer key instead of writing it")
def sb_graph_walk(fn, *inputs):
    from autograder.grader.keys import answer_key
    walked = answer_key("06_checkpointing").graph_saved_tensors(fn(*inputs))
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for _, _, t in walked}.values())


@wrong_("saved_bytes", "tells storages apart by t.data_ptr(), where the view starts: two views of one storage "
                       "count twice", says="two views of one storage")
def sb_by_data_ptr(fn, *inputs):
    import torch
    sizes = {}

    def pack(t):
        sizes[(t.device, t.data_ptr())] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(sizes.values())


@right_("saved_bytes", "tells storages apart by id(t.untyped_storage()): one Python object per live storage")
def sb_by_storage_object(fn, *inputs):
    import torch
    sizes = {}

    def pack(t):
        sizes[id(t.untyped_storage())] = t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(sizes.values())


@right_("saved_bytes", "keeps the saved tensors in a list, then sums the distinct storages afterwards")
def sb_collect_then_sum(fn, *inputs):
    import torch
    kept = []

    def pack(t):
        kept.append(t.detach())
        return kept[-1]

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs)
    storages = {}
    for t in kept:
        storages[(str(t.device), t.untyped_storage().data_ptr())] = t.untyped_storage().nbytes()
    del out
    return int(sum(storages.values()))


# estimate_activation_bytes(N, S, D, L, bytes_per_elem=2, const=20) ------------------------------------
@wrong_("estimate_activation_bytes", "counts values, not bytes (the quoted ~3 GB): bytes_per_elem left out")
def eab_values(N, S, D, L, bytes_per_elem=2, const=20):
    return N * S * D * L * const


@wrong_("estimate_activation_bytes", "ignores const: always 20")
def eab_fixed_const(N, S, D, L, bytes_per_elem=2, const=20):
    return N * S * D * L * 20 * bytes_per_elem


@wrong_("estimate_activation_bytes", "ignores bytes_per_elem: always fp16")
def eab_fixed_bytes(N, S, D, L, bytes_per_elem=2, const=20):
    return N * S * D * L * const * 2


@wrong_("estimate_activation_bytes", "returns gigabytes")
def eab_gigabytes(N, S, D, L, bytes_per_elem=2, const=20):
    return N * S * D * L * const * bytes_per_elem / 1e9


@wrong_("estimate_activation_bytes", "forgets the number of layers")
def eab_one_layer(N, S, D, L, bytes_per_elem=2, const=20):
    return N * S * D * const * bytes_per_elem


@wrong_("estimate_activation_bytes", "quadratic in the sequence length: S * S")
def eab_s_squared(N, S, D, L, bytes_per_elem=2, const=20):
    return N * S * S * D * L * const * bytes_per_elem


@wrong_("estimate_activation_bytes", "int() of the product: a fractional const loses its half byte",
        says="1,732.5")
def eab_int(N, S, D, L, bytes_per_elem=2, const=20):
    return int(N * S * D * L * const * bytes_per_elem)


@right_("estimate_activation_bytes", "math.prod over the factors")
def eab_prod(N, S, D, L, bytes_per_elem=2, const=20):
    import math
    return math.prod((N, S, D, L, const, bytes_per_elem))


@right_("estimate_activation_bytes", "in floating point, values first, then bytes")
def eab_float(N, S, D, L, bytes_per_elem=2, const=20):
    values = float(N) * S * D * L * const
    return values * bytes_per_elem


# checkpoint(fn, *args) ---------------------------------------------------------------------------------
@wrong_("checkpoint",
        "forward records the block's graph (grad mode on) and backward reuses it: everything is saved, "
        "nothing is recomputed")
def ck_forward_under_grad(fn, *args):
    import torch

    class KeepGraph(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            with torch.enable_grad():
                ctx.inputs = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                              for a in args]
                ctx.outputs = fn(*ctx.inputs)
            outs = ctx.outputs if isinstance(ctx.outputs, tuple) else (ctx.outputs,)
            detached = tuple(o.detach() for o in outs)
            return detached if isinstance(ctx.outputs, tuple) else detached[0]

        @staticmethod
        def backward(ctx, *grads):
            outs = ctx.outputs if isinstance(ctx.outputs, tuple) else (ctx.outputs,)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return tuple(a.grad if isinstance(a, torch.Tensor) else None for a in ctx.inputs)

    return KeepGraph.apply(*args)


@wrong_("checkpoint", "recomputes without restoring the RNG state: dropout draws another mask")
def ck_no_rng(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            args = [next(saved).detach().requires_grad_(n) if t else o
                    for t, o, n in zip(ctx.is_tensor, ctx.others, ctx.needs_input_grad)]
            with torch.enable_grad():
                out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return tuple(a.grad if t else None for a, t in zip(args, ctx.is_tensor))

    return Recompute.apply(*args)


@wrong_("checkpoint", "returns a detached output computed under no_grad: no gradient reaches the inputs")
def ck_detached(fn, *args):
    import torch
    with torch.no_grad():
        out = fn(*args)
    return tuple(o.detach() for o in out) if isinstance(out, tuple) else out.detach()


@wrong_("checkpoint", "restores the RNG state without fork_rng: the global generator is left rewound")
def ck_rewinds_rng(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.state = torch.get_rng_state()
            ctx.cuda = [torch.cuda.get_rng_state(a.device) for a in args[:1]
                        if isinstance(a, torch.Tensor) and a.is_cuda]
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            args = [next(saved).detach().requires_grad_(n) if t else o
                    for t, o, n in zip(ctx.is_tensor, ctx.others, ctx.needs_input_grad)]
            torch.set_rng_state(ctx.state)
            for state in ctx.cuda:
                torch.cuda.set_rng_state(state, args[0].device)
            with torch.enable_grad():
                out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return tuple(a.grad if t else None for a, t in zip(args, ctx.is_tensor))

    return Recompute.apply(*args)


@wrong_("checkpoint",
        "backpropagates with torch.autograd.grad w.r.t. the inputs only: the block's parameters get no gradient")
def ck_grad_inputs_only(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.devices = sorted({a.get_device() for a in args if isinstance(a, torch.Tensor) and a.is_cuda})
            ctx.states = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in ctx.devices])
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            args = [next(saved).detach().requires_grad_(n) if t else o
                    for t, o, n in zip(ctx.is_tensor, ctx.others, ctx.needs_input_grad)]
            with torch.random.fork_rng(devices=ctx.devices):
                torch.set_rng_state(ctx.states[0])
                for d, s in zip(ctx.devices, ctx.states[1]):
                    torch.cuda.set_rng_state(s, d)
                with torch.enable_grad():
                    out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            leaves = [a for a, t in zip(args, ctx.is_tensor) if t and a.requires_grad]
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            found = iter(torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True))
            return tuple(next(found) if t and a.requires_grad else None for a, t in zip(args, ctx.is_tensor))

    return Recompute.apply(*args)


@wrong_("checkpoint", "forgets torch.enable_grad() in backward: the recompute records no graph")
def ck_no_enable_grad(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.devices = sorted({a.get_device() for a in args if isinstance(a, torch.Tensor) and a.is_cuda})
            ctx.states = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in ctx.devices])
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            args = [next(saved).detach().requires_grad_(n) if t else o
                    for t, o, n in zip(ctx.is_tensor, ctx.others, ctx.needs_input_grad)]
            with torch.random.fork_rng(devices=ctx.devices):
                torch.set_rng_state(ctx.states[0])
                for d, s in zip(ctx.devices, ctx.states[1]):
                    torch.cuda.set_rng_state(s, d)
                out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            torch.autograd.backward(list(outs), list(grads))
            return tuple(a.grad if t else None for a, t in zip(args, ctx.is_tensor))

    return Recompute.apply(*args)


@wrong_("checkpoint", "takes the RNG state after running fn in forward: the recompute draws the next mask")
def ck_rng_after(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.devices = sorted({a.get_device() for a in args if isinstance(a, torch.Tensor) and a.is_cuda})
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            out = fn(*args)
            ctx.states = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in ctx.devices])
            return out

        @staticmethod
        def backward(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            args = [next(saved).detach().requires_grad_(n) if t else o
                    for t, o, n in zip(ctx.is_tensor, ctx.others, ctx.needs_input_grad)]
            with torch.random.fork_rng(devices=ctx.devices):
                torch.set_rng_state(ctx.states[0])
                for d, s in zip(ctx.devices, ctx.states[1]):
                    torch.cuda.set_rng_state(s, d)
                with torch.enable_grad():
                    out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return tuple(a.grad if t else None for a, t in zip(args, ctx.is_tensor))

    return Recompute.apply(*args)


@wrong_("checkpoint",
        "returns gradients for the tensor arguments only: one too few when a number is among the arguments")
def ck_skips_non_tensors(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.devices = sorted({a.get_device() for a in args if isinstance(a, torch.Tensor) and a.is_cuda})
            ctx.states = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in ctx.devices])
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            args = [next(saved).detach().requires_grad_(n) if t else o
                    for t, o, n in zip(ctx.is_tensor, ctx.others, ctx.needs_input_grad)]
            with torch.random.fork_rng(devices=ctx.devices):
                torch.set_rng_state(ctx.states[0])
                for d, s in zip(ctx.devices, ctx.states[1]):
                    torch.cuda.set_rng_state(s, d)
                with torch.enable_grad():
                    out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return tuple(a.grad for a in args if isinstance(a, torch.Tensor))

    return Recompute.apply(*args)


@wrong_("checkpoint",
        "recomputes on the saved inputs themselves, not detached copies: the gradient reaches the leaves twice")
def ck_not_detached(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.devices = sorted({a.get_device() for a in args if isinstance(a, torch.Tensor) and a.is_cuda})
            ctx.states = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in ctx.devices])
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            args = [next(saved) if t else o for t, o in zip(ctx.is_tensor, ctx.others)]
            with torch.random.fork_rng(devices=ctx.devices):
                torch.set_rng_state(ctx.states[0])
                for d, s in zip(ctx.devices, ctx.states[1]):
                    torch.cuda.set_rng_state(s, d)
                with torch.enable_grad():
                    out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return tuple(a.grad if t else None for a, t in zip(args, ctx.is_tensor))

    return Recompute.apply(*args)


def _checkpoint_variant(every_input_needs_grad=False, every_output=False, refuses_grad=True):
    """A correct checkpoint but for one bug, chosen by the flags (the entries below)."""
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, fn, *args):
            ctx.fn = fn
            ctx.is_tensor = [isinstance(a, torch.Tensor) for a in args]
            ctx.others = [None if t else a for a, t in zip(args, ctx.is_tensor)]
            ctx.devices = sorted({a.get_device() for a in args if isinstance(a, torch.Tensor) and a.is_cuda})
            ctx.states = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in ctx.devices])
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            if refuses_grad and not torch.autograd._is_checkpoint_valid():
                raise RuntimeError("checkpoint cannot give the parameters' gradients to torch.autograd.grad")
            saved = iter(ctx.saved_tensors)
            args = [(next(saved).detach().requires_grad_(every_input_needs_grad or n)) if t else o
                    for t, o, n in zip(ctx.is_tensor, ctx.others, ctx.needs_input_grad[1:])]
            with torch.random.fork_rng(devices=ctx.devices):
                torch.set_rng_state(ctx.states[0])
                for d, s in zip(ctx.devices, ctx.states[1]):
                    torch.cuda.set_rng_state(s, d)
                with torch.enable_grad():
                    out = ctx.fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = list(zip(outs, grads)) if every_output else [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return (None, *[a.grad if t else None for a, t in zip(args, ctx.is_tensor)])

    return Recompute


@wrong_("checkpoint", "makes every tensor argument require grad in backward: int64 indices cannot",
        says="int64 row indices")
def ck_every_input_needs_grad(fn, *args):
    return _checkpoint_variant(every_input_needs_grad=True).apply(fn, *args)


@wrong_("checkpoint", "backpropagates through every output, an integer one (no gradient) included",
        says="a second output of int64 indices")
def ck_every_output(fn, *args):
    return _checkpoint_variant(every_output=True).apply(fn, *args)


@right_("checkpoint", "the helper of the two entries above, without their bugs")
def ck_variant_without_bugs(fn, *args):
    return _checkpoint_variant().apply(fn, *args)


@wrong_("checkpoint", "never refuses torch.autograd.grad: the parameters' gradients go to .grad and the call gets "
                      "None for them, in silence", says="returned None for parameter fc1.weight")
def ck_silent_under_grad(fn, *args):
    return _checkpoint_variant(refuses_grad=False).apply(fn, *args)


@wrong_("checkpoint", "calls torch.utils.checkpoint instead of building it")
def ck_torch(fn, *args):
    from torch.utils.checkpoint import checkpoint as torch_checkpoint
    return torch_checkpoint(fn, *args, use_reentrant=False)


@right_("checkpoint", "saves and restores the RNG states by hand around the recompute, one output at a time")
def ck_manual_rng(fn, *args):
    import torch

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            ctx.args = args
            tensors = [a for a in args if torch.is_tensor(a)]
            ctx.devices = sorted({t.device.index or 0 for t in tensors if t.device.type == "cuda"})
            ctx.cpu = torch.random.get_rng_state()
            ctx.gpu = {d: torch.cuda.get_rng_state(d) for d in ctx.devices}
            ctx.save_for_backward(*tensors)
            ctx.args = [None if torch.is_tensor(a) else a for a in args]
            return fn(*args)

        @staticmethod
        def backward(ctx, *grads):
            if not torch.autograd._is_checkpoint_valid():
                raise RuntimeError("torch.autograd.grad cannot see the block's parameters through this checkpoint")
            tensors = list(ctx.saved_tensors)
            inputs = []
            for a in ctx.args:
                if a is None:
                    t = tensors.pop(0)
                    inputs.append(t.detach().requires_grad_(t.requires_grad))
                else:
                    inputs.append(a)
            cpu_now = torch.random.get_rng_state()
            gpu_now = {d: torch.cuda.get_rng_state(d) for d in ctx.devices}
            torch.random.set_rng_state(ctx.cpu)
            for d, s in ctx.gpu.items():
                torch.cuda.set_rng_state(s, d)
            try:
                with torch.enable_grad():
                    out = fn(*inputs)
            finally:
                torch.random.set_rng_state(cpu_now)
                for d, s in gpu_now.items():
                    torch.cuda.set_rng_state(s, d)
            for o, g in zip(out if isinstance(out, tuple) else (out,), grads):
                if o.requires_grad and g is not None:
                    o.backward(g, retain_graph=True)
            return tuple(t.grad if torch.is_tensor(t) and t.requires_grad else None for t in inputs)

    return Recompute.apply(*args)


@right_("checkpoint",
        "tensors as the Function's inputs, other arguments through a closure; fork_rng over the inputs' GPUs")
def ck_closure(fn, *args):
    import torch
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def call(*tensors):
        full = list(args)
        for i, t in zip(positions, tensors):
            full[i] = t
        return fn(*full)

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            ctx.devices = sorted({t.get_device() for t in tensors if t.is_cuda})
            with torch.random.fork_rng(devices=ctx.devices):  # read the states without changing them
                ctx.cpu = torch.get_rng_state()
                ctx.gpu = [torch.cuda.get_rng_state(d) for d in ctx.devices]
            ctx.save_for_backward(*tensors)
            return call(*tensors)

        @staticmethod
        def backward(ctx, *grads):
            if not torch.autograd._is_checkpoint_valid():
                raise RuntimeError("use .backward(): torch.autograd.grad misses the parameters inside fn")
            leaves = [t.detach().requires_grad_(needs) for t, needs in zip(ctx.saved_tensors, ctx.needs_input_grad)]
            with torch.random.fork_rng(devices=ctx.devices), torch.enable_grad():
                torch.set_rng_state(ctx.cpu)
                for d, s in zip(ctx.devices, ctx.gpu):
                    torch.cuda.set_rng_state(s, d)
                out = call(*leaves)
            outs = out if isinstance(out, tuple) else (out,)
            used = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            torch.autograd.backward(tuple(o for o, _ in used), tuple(g for _, g in used))
            return tuple(t.grad for t in leaves)

    return Recompute.apply(*[args[i] for i in positions])


# checkpoint_sequential(blocks, segments, x) ----------------------------------------------------------------
@wrong_("checkpoint_sequential", "segments off by one: checkpoints the last segment too")
def cs_last_checkpointed(blocks, segments, x):
    import functools

    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                torch.set_rng_state(ctx.state)
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def run_part(part, t):
        for b in part:
            t = b(t)
        return t

    blocks = list(blocks)
    size = len(blocks) // segments
    for s in range(segments):
        part = blocks[s * size:] if s == segments - 1 else blocks[s * size:(s + 1) * size]
        x = Ckpt.apply(functools.partial(run_part, part), x)
    return x


@wrong_("checkpoint_sequential", "segment size rounded up: ceil(n / segments) blocks a segment")
def cs_ceil_size(blocks, segments, x):
    import functools
    import math

    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                torch.set_rng_state(ctx.state)
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def run_part(part, t):
        for b in part:
            t = b(t)
        return t

    blocks = list(blocks)
    size = math.ceil(len(blocks) / segments)
    start = 0
    for _ in range(segments - 1):
        part = blocks[start:start + size]
        if part:
            x = Ckpt.apply(functools.partial(run_part, part), x)
        start += size
    for b in blocks[start:]:
        x = b(x)
    return x


@wrong_("checkpoint_sequential", "reads segments as the number of blocks per segment")
def cs_segments_as_size(blocks, segments, x):
    import functools

    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                torch.set_rng_state(ctx.state)
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def run_part(part, t):
        for b in part:
            t = b(t)
        return t

    blocks = list(blocks)
    starts = list(range(0, len(blocks), segments))
    for start in starts[:-1]:
        part = blocks[start:start + segments]
        x = Ckpt.apply(functools.partial(run_part, part), x)
    for b in blocks[starts[-1]:]:
        x = b(x)
    return x


@wrong_("checkpoint_sequential", "no checkpointing at all: every block runs plainly")
def cs_plain(blocks, segments, x):
    for block in blocks:
        x = block(x)
    return x


@wrong_("checkpoint_sequential", "drops the blocks left over after the last full segment")
def cs_drops_remainder(blocks, segments, x):
    import functools

    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                torch.set_rng_state(ctx.state)
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def run_part(part, t):
        for b in part:
            t = b(t)
        return t

    blocks = list(blocks)
    size = len(blocks) // segments
    for s in range(segments - 1):
        part = blocks[s * size:(s + 1) * size]
        x = Ckpt.apply(functools.partial(run_part, part), x)
    for b in blocks[(segments - 1) * size:segments * size]:
        x = b(x)
    return x


@wrong_("checkpoint_sequential", "late-binding closure: every segment reruns with the loop's last bounds in backward")
def cs_late_binding(blocks, segments, x):
    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                torch.set_rng_state(ctx.state)
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    blocks = list(blocks)
    size = len(blocks) // segments
    start = stop = 0

    def run_segment(t):
        for block in blocks[start:stop]:
            t = block(t)
        return t

    for start in range(0, size * (segments - 1), size):
        stop = start + size
        x = Ckpt.apply(run_segment, x)
    for block in blocks[size * (segments - 1):]:
        x = block(x)
    return x


@wrong_("checkpoint_sequential", "its checkpoint does not replay the RNG: dropout masks differ in backward")
def cs_no_rng(blocks, segments, x):
    import functools

    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run = run
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.enable_grad():
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def run_part(part, t):
        for b in part:
            t = b(t)
        return t

    blocks = list(blocks)
    size = len(blocks) // segments
    for s in range(segments - 1):
        part = blocks[s * size:(s + 1) * size]
        x = Ckpt.apply(functools.partial(run_part, part), x)
    for b in blocks[(segments - 1) * size:]:
        x = b(x)
    return x


@wrong_("checkpoint_sequential",
        "the plain segment first: runs the first segment (with the remainder) plainly, checkpoints the rest")
def cs_plain_first(blocks, segments, x):
    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                torch.set_rng_state(ctx.state)
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def runner(part):
        def run(t):
            for b in part:
                t = b(t)
            return t
        return run

    blocks = list(blocks)
    size = len(blocks) // segments
    first = len(blocks) - size * (segments - 1)
    x = runner(blocks[:first])(x)
    for start in range(first, len(blocks), size):
        x = Ckpt.apply(runner(blocks[start:start + size]), x)
    return x


@wrong_("checkpoint_sequential", "calls torch.utils.checkpoint.checkpoint_sequential instead of building it")
def cs_torch(blocks, segments, x):
    import torch.utils.checkpoint
    return torch.utils.checkpoint.checkpoint_sequential(blocks, segments, x, use_reentrant=True)


@wrong_("checkpoint_sequential", "no check of segments: segments=0 divides by zero (ZeroDivisionError, not ValueError)",
        says="segments=0")
def cs_no_range_check(blocks, segments, x):
    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run, ctx.state = run, torch.get_rng_state()
            ctx.devices = [inp.get_device()] if inp.is_cuda else []
            ctx.gpu = [torch.cuda.get_rng_state(d) for d in ctx.devices]
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            (inp,) = ctx.saved_tensors
            inp = inp.detach().requires_grad_()
            with torch.random.fork_rng(devices=ctx.devices), torch.enable_grad():
                torch.set_rng_state(ctx.state)
                for d, s in zip(ctx.devices, ctx.gpu):
                    torch.cuda.set_rng_state(s, d)
                out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def runner(part):
        def run(t):
            for b in part:
                t = b(t)
            return t
        return run

    blocks = list(blocks)
    size = len(blocks) // segments
    stop = 0
    for start in range(0, size * (segments - 1), size):
        stop = start + size
        x = Ckpt.apply(runner(blocks[start:stop]), x)
    return runner(blocks[stop:])(x)


@right_("checkpoint_sequential", "precomputed segment bounds and functools.partial, its own checkpoint Function")
def cs_partial(blocks, segments, x):
    import functools

    import torch

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run, inp):
            ctx.run = run
            ctx.devices = [inp.get_device()] if inp.is_cuda else []
            ctx.cpu = torch.get_rng_state()
            ctx.gpu = [torch.cuda.get_rng_state(d) for d in ctx.devices]
            ctx.save_for_backward(inp)
            return run(inp)

        @staticmethod
        def backward(ctx, g):
            inp = ctx.saved_tensors[0].detach().requires_grad_()
            with torch.random.fork_rng(devices=ctx.devices):
                torch.set_rng_state(ctx.cpu)
                for d, s in zip(ctx.devices, ctx.gpu):
                    torch.cuda.set_rng_state(s, d)
                with torch.enable_grad():
                    out = ctx.run(inp)
            torch.autograd.backward(out, g)
            return None, inp.grad

    def run(chunk, t):
        for block in chunk:
            t = block(t)
        return t

    blocks = list(blocks)
    if not 1 <= segments <= len(blocks):
        raise ValueError("segments out of range")
    size = len(blocks) // segments
    bounds = [(i * size, (i + 1) * size) for i in range(segments - 1)]
    for a, b in bounds:
        x = Ckpt.apply(functools.partial(run, blocks[a:b]), x)
    return run(blocks[size * (segments - 1):], x)


@right_("checkpoint_sequential", "an nn.Sequential per segment as the checkpointed function")
def cs_sequential_segments(blocks, segments, x):
    import torch
    from torch import nn

    class Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, module, inp):
            ctx.module = module
            ctx.devices = [inp.get_device()] if inp.is_cuda else []
            with torch.random.fork_rng(devices=ctx.devices):
                ctx.states = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in ctx.devices])
            ctx.save_for_backward(inp)
            return module(inp)

        @staticmethod
        def backward(ctx, g):
            inp = ctx.saved_tensors[0].detach().requires_grad_()
            with torch.random.fork_rng(devices=ctx.devices), torch.enable_grad():
                torch.set_rng_state(ctx.states[0])
                for d, s in zip(ctx.devices, ctx.states[1]):
                    torch.cuda.set_rng_state(s, d)
                out = ctx.module(inp)
            out.backward(g)
            return None, inp.grad

    blocks = list(blocks)
    if segments < 1 or segments > len(blocks):
        raise ValueError(f"segments={segments} with {len(blocks)} blocks")
    size = len(blocks) // segments
    done = 0
    while done < size * (segments - 1):
        x = Ckpt.apply(nn.Sequential(*blocks[done:done + size]), x)
        done += size
    return nn.Sequential(*blocks[done:])(x)
