"""The saved-tensor ledger counts what backward keeps, and sees it freed with the graph."""
import gc

import pytest
import torch

from autograder.learner.device import available_devices
from autograder.learner.memory import FREED, SavedTensorLedger, measure, saved_values_by_name


@pytest.fixture(params=available_devices())
def device(request):
    return torch.device(request.param)


def test_counts_each_saved_storage_once(device):
    x = torch.randn(1000, dtype=torch.float32, device=device, requires_grad=True)
    with SavedTensorLedger() as ledger:
        y = x * x          # saves x twice (self and other): one storage
    assert ledger.total_bytes == 4000
    with SavedTensorLedger() as ledger:
        z = torch.exp(x)   # saves its output
        w = z.sin()        # saves z again: still one storage
    assert ledger.total_bytes == 4000
    with SavedTensorLedger() as ledger:
        (x + 1).sum()      # add and sum save no tensors
    assert ledger.total_bytes == 0
    del y, w


def test_live_bytes_fall_to_zero_when_the_graph_dies(device):
    w = torch.randn(64, 64, device=device, requires_grad=True)
    with SavedTensorLedger() as ledger:
        kept = []
        for _ in range(3):
            kept.append(torch.tanh(torch.randn(8, 64, device=device) @ w).sum())
        held = ledger.live_bytes
        assert held > 0 and held == ledger.total_bytes
        kept.clear()
        gc.collect()
        assert ledger.live_bytes == 0 and ledger.peak_bytes == held
        torch.tanh(w).sum().backward()   # backward frees what it used
        assert ledger.live_bytes == 0


def test_measure_reports_saved_bytes_and_time(device):
    w = torch.randn(32, 32, device=device, requires_grad=True)
    m = measure(lambda: torch.relu(w @ w).sum().backward(), device)
    assert m.saved_bytes >= 32 * 32 * 4 and 0 < m.peak_saved_bytes <= m.saved_bytes and m.seconds > 0
    assert (m.peak_bytes is None) == (device.type != "cuda")


def test_gradients_are_unchanged_by_counting(device):
    x = torch.randn(8, 16, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(16, 16, dtype=torch.float64, device=device, requires_grad=True)
    plain = torch.autograd.grad(torch.tanh(torch.tanh(x @ w)).sum(), (x, w))
    with SavedTensorLedger():
        counted = torch.autograd.grad(torch.tanh(torch.tanh(x @ w)).sum(), (x, w))
    assert all(torch.equal(a, b) for a, b in zip(plain, counted))


def test_a_new_storage_at_a_freed_address_counts_as_new():
    """Free a saved storage, then save another at its address (the allocator often reuses one; here
    both storages are views of one buffer, so the address is the same every time)."""
    buffer = bytearray(4096)
    with SavedTensorLedger() as ledger:
        a = torch.frombuffer(buffer, dtype=torch.float32).requires_grad_()
        y = a * a            # saves a (self and other): 4096 bytes, one storage
        first = a.untyped_storage().data_ptr()
        del y, a             # the graph and the storage die
        b = torch.frombuffer(buffer, dtype=torch.float32).requires_grad_()  # a new storage, the same address
        assert b.untyped_storage().data_ptr() == first
        z = b * b
        del z, b
    assert (ledger.total_bytes, ledger.peak_bytes, ledger.live_bytes) == (8192, 4096, 0)


def test_saved_values_by_name_reads_what_a_node_keeps_and_sees_it_freed():
    x = torch.ones(3, requires_grad=True)
    y = x.exp()
    saved = saved_values_by_name(y.grad_fn)
    assert list(saved) == ["result"] and saved["result"].data_ptr() == y.data_ptr()
    y.sum().backward()
    assert saved_values_by_name(y.grad_fn) == {"result": FREED}
    times_two = saved_values_by_name((x * 2.0).grad_fn)  # a number operand is kept as a 0-d tensor
    assert times_two["self"] is None and times_two["other"].shape == ()
    assert saved_values_by_name((x * 2).mean().grad_fn) == {"self_sym_numel": 3, "self_sym_sizes": (3,)}


def test_saved_values_by_name_reads_a_custom_function():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * a * g

    x = torch.ones(2, requires_grad=True)
    out = Square.apply(x)
    (kept,) = saved_values_by_name(out.grad_fn)["saved_tensors"]
    assert torch.equal(kept, x)
    out.sum().backward()
    assert saved_values_by_name(out.grad_fn) == {"saved_tensors": FREED}
