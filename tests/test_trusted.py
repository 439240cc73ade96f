"""The trusted-grading boundary: only data comes back from the kernel, and what a call changed
in the grader's models, optimizers and tensors is carried back to them."""
import contextlib
import errno
import io
import json
import os
import pathlib
import pickle
import tempfile
import zipfile

import mutation
import pytest
import torch

from autograder import checks
from autograder.checks import boundary, responder
from autograder.grader import isolation, trusted
from autograder.learner import memory


def round_trip(value, holders=()):
    buffer = io.BytesIO()
    torch.save(boundary.encode(value, boundary.param_names(list(holders))), buffer)
    buffer.seek(0)
    return boundary.decode(torch.load(buffer, weights_only=True), list(holders))


def test_data_crosses_and_code_does_not():
    sent = {"t": torch.ones(2, requires_grad=True), "n": 3, "s": "x", "size": torch.Size([2, 3]),
            "dtype": torch.float16, "device": torch.device("cpu"), "items": (1.5, [None, True])}
    got = round_trip(sent)
    assert torch.equal(got["t"], sent["t"]) and got["t"].requires_grad
    assert {k: v for k, v in got.items() if k != "t"} == {k: v for k, v in sent.items() if k != "t"}
    assert isinstance(got["size"], torch.Size)
    assert isinstance(round_trip(lambda: 1), boundary.Opaque)
    assert isinstance(round_trip(object()), boundary.Opaque)


def test_exceptions_and_the_autograders_records_come_back_as_data():
    raised = round_trip(ValueError("unknown name"))
    assert (raised.type_name, raised.message) == ("ValueError", "unknown name")
    record = memory.Measurement(saved_bytes=1, peak_saved_bytes=2, peak_bytes=None, seconds=0.5)
    assert round_trip(record) == record


def test_a_huge_exception_message_is_cut_in_the_kernel_and_keeps_its_type():
    raised = round_trip(ValueError("x" * 5_000_000))
    assert raised.type_name == "ValueError"
    kept = raised.message.index("…")
    assert kept > boundary.EXCEPTION_CHARS - 40 and len(raised.message) <= boundary.EXCEPTION_CHARS
    assert raised.message.endswith(f"[{5_000_000 - kept:,} more characters]")


def test_a_student_call_that_raises_a_huge_message_fails_with_its_type_and_a_cut_message():
    def shouts(x):
        raise ValueError("x" * 5_000_000)
    exchange = isolation.Exchange()
    try:
        remote = mutation.Loopback({"shouts": shouts}, exchange)
        with pytest.raises(checks.GradingError, match="ValueError") as caught:
            remote.call("shouts", boundary.StudentName("shouts"), [torch.ones(2)], {})
    finally:
        exchange.remove()
    assert "more characters]" in str(caught.value) and len(str(caught.value)) < boundary.EXCEPTION_CHARS + 100


def test_a_dataclass_from_elsewhere_is_not_rebuilt():
    encoded = {"__dataclass__": ["os", "path"], "fields": {}}
    assert isinstance(boundary.decode(encoded, []), boundary.Opaque)


def test_decoding_never_imports_the_module_a_record_names(monkeypatch):
    """A dataclass whose __module__ was set to `autograder.no_such_module` once made the grader's decode import
    it: the ModuleNotFoundError counted as the grader's failure, and the notebook was never graded."""
    monkeypatch.setattr("importlib.import_module", lambda *a, **k: pytest.fail("decode imported a module"))
    for module, name in (("autograder.no_such_module", "Record"), ("autograder.learner.memory", "Measurement.x"),
                         ("autograder.learner.memory", "SavedTensorLedger")):  # the last is no dataclass
        got = boundary.decode({"__dataclass__": [module, name], "fields": {}}, [])
        assert isinstance(got, boundary.Opaque) and "not a grading record" in repr(got), (module, name)
    fields = {"saved_bytes": 1, "peak_saved_bytes": 2, "peak_bytes": None, "seconds": 0.5}
    assert boundary.decode({"__dataclass__": ["autograder.learner.memory", "Measurement"], "fields": fields}, []) \
        == memory.Measurement(**fields), "a record of a module the grader has imported is rebuilt"


def test_answers_shaped_to_fail_the_graders_reading_are_the_submissions_zero(tmp_path):
    """Fields a record does not have, a dtype that is not one, a parameter the grader never sent: each is
    refused as what came back from the notebook, never a failure of the grader's."""
    answers = [{"__dataclass__": ["autograder.learner.memory", "Measurement"], "fields": {"no_such_field": 1}},
               {"__torch__": "device", "text": "no-such-device:7"}, {"__parameter__": [3, "weight"]}]
    for answer in answers:
        exchange = isolation.Exchange()
        try:
            remote = mutation.Loopback({}, exchange)
            remote.ask = lambda request, response, answer=answer: torch.save({"result": answer, "after": []},
                                                                            response)
            with pytest.raises(checks.GradingError, match="could not be read"):
                remote.call("relu_grad", boundary.StudentName("relu_grad"), [], {})
        finally:
            exchange.remove()
    assert isinstance(boundary.decode({"__torch__": "dtype", "text": "torch._C"}, []), boundary.Opaque)


def test_the_kernel_answers_with_a_private_copy_that_a_notebook_cannot_patch():
    """The notebook's own `autograder` may be patched; the copy that answers the grader is loaded from the
    package's files while the call runs, and the notebook's copy is back, as it was, afterwards."""
    import sys
    public = sys.modules["autograder.checks.student_calls"]
    saved = public._autograd_forbidden
    public._autograd_forbidden = lambda exercise: contextlib.nullcontext()  # what a notebook did
    try:
        with responder.private_package() as private:
            inside = sys.modules["autograder.checks.student_calls"]
            assert inside is not public and private.__file__ == responder.__file__
            with pytest.raises(Exception, match="called autograd") as refused:  # the private copy's GradingError
                inside.call_student("relu_grad", lambda x: torch.autograd.grad(x.sum(), x),
                                    torch.ones(2, requires_grad=True), no_autograd=True)
        assert type(refused.value).__name__ == "GradingError" and type(refused.value) is not checks.GradingError
        assert sys.modules["autograder.checks.student_calls"] is public and public._autograd_forbidden is not saved
    finally:
        public._autograd_forbidden = saved


def test_a_models_own_parameter_comes_back_as_the_graders_parameter():
    model = torch.nn.Linear(2, 2)
    assert round_trip(model.weight, [model]) is model.weight


def test_state_holders_are_found_in_arguments_and_closures():
    model, leaf = torch.nn.Linear(2, 1), torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    def driver(): return model, optimizer
    found = trusted.state_holders(driver, [[leaf], {"x": leaf}])
    assert {id(h) for h in found} == {id(model), id(optimizer), id(leaf)}
    assert trusted.state_holders(lambda: None, [(leaf * 2)]) == []  # not a leaf: nothing to carry
    assert trusted.state_holders(lambda: None, [torch.zeros(2)]) == []  # an input: never taken back


def test_a_student_name_inside_a_nested_function_is_seen():
    kernel_connection = object()
    namespace = {"StudentFn": boundary.StudentName("StudentFn", kernel_connection)}
    exec("def make():\n    return lambda t: StudentFn.apply(t)", namespace)
    assert boundary.remote_for(namespace["make"], []) is kernel_connection
    assert boundary.remote_for(lambda: None, [torch.ones(1)]) is None


def test_what_a_student_call_changes_is_carried_back(tmp_path):
    model = torch.nn.Linear(3, 1)
    def freeze_and_step(m):
        m.bias.requires_grad_(False)
        m(torch.ones(1, 3)).sum().backward()
        with torch.no_grad():
            m.weight.add_(1.0)
        return m.weight
    namespace = {"freeze_and_step": freeze_and_step}
    before = model.weight.detach().clone()
    exchange = isolation.Exchange()
    try:
        remote = mutation.Loopback(namespace, exchange)
        got = remote.call("freeze", boundary.StudentName("freeze_and_step"), [model], {})
    finally:
        exchange.remove()
    assert got is model.weight
    assert torch.equal(model.weight.detach(), before + 1) and not model.bias.requires_grad
    assert torch.equal(model.weight.grad, torch.ones(1, 3))


def test_a_patched_comparison_in_the_kernel_does_not_reach_the_grader():
    source = ('"""relu_grad: the cell"""\nimport torch\nfrom autograder import checks\n'
              'x = torch.tensor([-1.0, 2.0], dtype=torch.float64)\n'
              'checks.expect_close("relu_grad", checks.call_student("relu_grad", relu_grad, x), (x > 0).double())')
    def cheat(x):
        checks.expect_close = lambda *a, **k: None  # the "kernel" patches its checks
        return x
    original = checks.expect_close
    exchange = isolation.Exchange()
    try:
        error = trusted.run_grade_cell(source, ["relu_grad"], mutation.Loopback({"relu_grad": cheat}, exchange))
    finally:
        checks.expect_close = original
        exchange.remove()
    assert isinstance(error, checks.GradingError) and "wrong values" in str(error)


def test_calling_a_student_name_outside_call_student_says_how_to_grade():
    with pytest.raises(checks.GradingError, match="plain mode"):
        boundary.StudentName("f")(1)


def test_an_exchange_file_planted_in_advance_is_refused(monkeypatch, tmp_path):
    exchange = isolation.Exchange()
    try:
        assert exchange.new_file(".in", b"data").read_bytes() == b"data"
        assert os.stat(exchange.folder).st_mode & 0o077 in (0, 0o011)  # others may not list it
        victim = tmp_path / "gradebook.db"
        victim.write_bytes(b"precious")
        monkeypatch.setattr(isolation.secrets, "token_hex", lambda n: "predicted")
        os.symlink(victim, exchange.folder / "predicted.in")
        with pytest.raises(FileExistsError):
            exchange.new_file(".in", b"overwrite")
        assert victim.read_bytes() == b"precious"
    finally:
        exchange.remove()
    assert not exchange.folder.exists()


def test_a_complex_number_comes_back_whatever_the_pickle_protocol_names_it():
    """torch.save pickles with protocol 2, which names `__builtin__ complex`; protocol 3 names
    `builtins complex` (later ones build names on the stack, which is refused)."""
    for protocol in (2, 3):
        trusted.check_pickle(pickle.dumps([1 + 2j], protocol=protocol))
    exchange = isolation.Exchange()
    try:
        remote = mutation.Loopback({"rotate": lambda z: z * 1j}, exchange)
        assert remote.call("rotate", boundary.StudentName("rotate"), [1 + 2j], {}) == -2 + 1j
    finally:
        exchange.remove()


def as_the_kernel(uid, folder, request, answer, to_kernel, from_kernel):
    """In a forked child, as the kernel's user: keep the answer file open; once the grader has unlinked it
    (a line on `to_kernel`), fill it and try the grader's side; report on `from_kernel`."""
    said = {}

    def attempt(label, fn):
        try:
            fn()
            said[label] = "done"
        except OSError as err:
            said[label] = errno.errorcode[err.errno]

    def fill():
        while True:
            held.write(bytes(2**20))
            held.flush()

    try:
        os.setgroups([]), os.setgid(uid), os.setuid(uid)
        held = open(answer, "ab")
        os.write(from_kernel, b"holding\n")
        os.read(to_kernel, 1)
        attempt("fill the unlinked answer", fill)
        attempt("list the folder", lambda: os.listdir(folder))
        attempt("list the answers", lambda: os.listdir(folder / "answers"))
        attempt("write a request", lambda: open(request, "ab").write(b"x"))
        attempt("make a file beside the requests", lambda: open(folder / "mine", "xb"))
        attempt("remove a request", lambda: os.unlink(request))
        os.write(from_kernel, json.dumps(said).encode() + b"\n")
        os.read(to_kernel, 1)  # held until the grader has written
    finally:
        os._exit(0)


def read_line(fd) -> str:
    line = b""
    while not line.endswith(b"\n") and (got := os.read(fd, 4096)):
        line += got
    return line.decode()


@pytest.mark.needs(os.geteuid() == 0, reason="only root gives a kernel a user of its own and a tmpfs per side")
def test_a_kernel_can_neither_write_nor_fill_the_graders_side_of_the_exchange(monkeypatch):
    """An answer that kept its file open after the grader unlinked it, and grew it until the exchange was
    full, once made the grader's next request fail (ENOSPC): the grader's failure, not the submission's."""
    tmp_path = pathlib.Path(tempfile.mkdtemp())  # where the kernel's user may pass, as bwrap's folders above
    tmp_path.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    uid = isolation.fresh_uid()
    exchange = isolation.Exchange(uid, size_mb=8)
    try:
        request, answer = exchange.new_file(".in", b"call"), exchange.new_file(".out", for_kernel=True)
        (to_kernel, go), (reply, from_kernel) = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            as_the_kernel(uid, exchange.folder, request, answer, to_kernel, from_kernel)
        os.close(to_kernel), os.close(from_kernel)
        try:
            assert read_line(reply) == "holding\n"
            answer.unlink()
            os.write(go, b"\n")
            said = json.loads(read_line(reply))
            assert said == {"fill the unlinked answer": "ENOSPC", "list the folder": "EACCES",
                            "list the answers": "EACCES", "write a request": "EACCES",
                            "make a file beside the requests": "EACCES", "remove a request": "EACCES"}
            assert exchange.new_file(".in", bytes(4 * 2**20)).stat().st_size == 4 * 2**20  # the grader's side
            assert exchange.new_file(".out", for_kernel=True).stat().st_uid == uid  # an empty answer file, still
            with pytest.raises(OSError, match="No space left"):
                exchange.new_file(".out", b"x" * 2**20, for_kernel=True)  # the answers are full
            assert request.read_bytes() == b"call"
        finally:
            os.write(go, b"\n")
            os.close(go), os.close(reply)
            os.waitpid(pid, 0)
    finally:
        exchange.remove()
    assert list(tmp_path.iterdir()) == [] and str(tmp_path) not in pathlib.Path("/proc/self/mounts").read_text()
    tmp_path.rmdir()


def test_numpy_numbers_come_back_as_plain_numbers():
    import numpy
    assert round_trip([numpy.float64(1.5), numpy.int64(3)]) == [1.5, 3]


def test_a_partial_of_a_student_function_is_sent_to_the_kernel():
    import functools
    kernel_connection = object()
    call = functools.partial(boundary.StudentName("f", kernel_connection), 2)
    assert boundary.remote_for(call, []) is kernel_connection
    assert responder._resolve(call, {"f": lambda a, b: a * b})(5) == 10


def test_gradients_the_caller_holds_reach_the_kernel_and_a_dtype_change_is_named():
    model = torch.nn.Linear(2, 1)
    model.weight.grad = torch.full((1, 2), 7.0)
    def grad_sum(m):
        return m.weight.grad.sum()
    def to_half(m):
        m.half()
    exchange = isolation.Exchange()
    try:
        remote = mutation.Loopback({"grad_sum": grad_sum, "to_half": to_half}, exchange)
        assert remote.call("g", boundary.StudentName("grad_sum"), [model], {}).item() == 14.0
        with pytest.raises(checks.GradingError, match="float32.*float16"):
            remote.call("h", boundary.StudentName("to_half"), [model], {})
    finally:
        exchange.remove()


# Bounds: nothing that comes back from a kernel is materialised before it is bounded.

def saved(value, path, **kwargs):
    torch.save(value, path, **kwargs)
    return path


def test_an_expanded_view_counts_every_element_it_shows():
    with pytest.raises(boundary.TooLarge, match="250,000,000 elements"):
        boundary.check_bounds({"result": [torch.ones(1).expand(250_000_000)]})
    boundary.check_bounds({"result": [torch.ones(1).expand(1000), torch.zeros(3, 4)]})  # small answers pass


def test_strings_numbers_nesting_items_and_total_bytes_are_bounded():
    small = boundary.Bounds(string_chars=10, number_bits=64, depth=3, items=20, total_bytes=1000)
    for value, message in [("x" * 11, "string of 11"), (2**65, "integer of 66 bits"), ([[[["deep"]]]], "3 deep"),
                           (list(range(21)), "more than 20 items"), (torch.zeros(200), "more than 1,000 bytes"),
                           (torch.zeros(1000)[:2], "more than 1,000 bytes")]:  # a view carries its whole storage
        with pytest.raises(boundary.TooLarge, match=message):
            boundary.check_bounds({"result": value}, small)
    boundary.check_bounds({"result": ["x" * 10, 2**63, [1], torch.zeros(10)]}, small)


def test_deep_nesting_cannot_exhaust_the_graders_stack():
    value = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(boundary.TooLarge, match="deep"):
        boundary.check_bounds(value)


def test_an_answer_file_is_bounded_before_it_is_read(tmp_path):
    assert trusted.read_answer(saved({"result": 1}, tmp_path / "fine.out")) == {"result": 1}
    big = saved({"result": torch.zeros(1000)}, tmp_path / "big.out")
    with pytest.raises(boundary.TooLarge, match="bytes"):
        trusted.read_answer(big, boundary.Bounds(file_bytes=1000))
    legacy = saved({"result": 1}, tmp_path / "legacy.out", _use_new_zipfile_serialization=False)
    with pytest.raises(boundary.TooLarge, match="zip format"):  # the legacy format allocates what it claims
        trusted.read_answer(legacy)
    squeezed = tmp_path / "squeezed.out"
    with zipfile.ZipFile(big) as source, zipfile.ZipFile(squeezed, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            target.writestr(member.filename, source.read(member))
    with pytest.raises(boundary.TooLarge, match="compressed"):  # a zip bomb inflates far beyond its size
        trusted.read_answer(squeezed)
    wordy = saved({"result": ["word"] * 10_000}, tmp_path / "wordy.out")
    with pytest.raises(boundary.TooLarge, match="structure"):
        trusted.read_answer(wordy, boundary.Bounds(structure_bytes=1000))
    os.mkfifo(tmp_path / "pipe.out")  # would block a plain open() forever
    with pytest.raises(boundary.TooLarge, match="not a plain file"):
        trusted.read_answer(tmp_path / "pipe.out")
    os.symlink("/dev/zero", tmp_path / "endless.out")
    with pytest.raises(OSError):
        trusted.read_answer(tmp_path / "endless.out")


def test_a_student_call_that_answers_too_much_scores_zero_with_the_reason():
    def expanded(x):
        return torch.ones(1).expand(250_000_000)
    exchange = isolation.Exchange()
    try:
        remote = mutation.Loopback({"expanded": expanded}, exchange)
        with pytest.raises(checks.GradingError, match="expanded: the answer from your notebook is too large"):
            remote.call("expanded", boundary.StudentName("expanded"), [torch.ones(2)], {})
    finally:
        exchange.remove()


# Every layout and dtype torch offers, as a hostile kernel could write them into its answer file: each
# is read (a plain dense tensor) or refused with a message, and the process that reads them never
# crashes. A sparse tensor with an index of -1 (check_invariants=False) once passed torch.load and
# ended the grader's worker with "double free or corruption" when a check called torch.isnan on it.
FUZZ = r'''
import io, json, sys, torch
from autograder.checks import boundary
from autograder.grader import trusted

def answers():
    dense = torch.arange(6.0).reshape(2, 3)
    yield "dense", dense
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
                  torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.uint16, torch.uint32,
                  torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2):
        yield f"dtype {dtype}", torch.ones(3).to(dtype)
    yield "sparse_coo", dense.to_sparse()
    yield "malformed sparse indices", torch.sparse_coo_tensor(torch.tensor([[0, 1, -1]]), torch.ones(3), (2,),
                                                                check_invariants=False)
    yield "indices past the end", torch.sparse_coo_tensor(torch.tensor([[0, 1, 10**9]]), torch.ones(3), (2,),
                                                            check_invariants=False)
    for layout in ("to_sparse_csr", "to_sparse_csc"):
        yield layout, getattr(dense, layout)()
    yield "sparse_bsr", dense.to_sparse_bsr((1, 1))
    yield "nested", torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    yield "quantized", torch.quantize_per_tensor(dense, 0.1, 0, torch.quint8)
    yield "meta", torch.empty(3, device="meta")
    yield "parameter", torch.nn.Parameter(dense)
    yield "expanded view", torch.ones(1).expand(5)
    yield "strided view", dense[:, ::2]

results = {}
for i, (label, value) in enumerate(answers()):
    path = f"{sys.argv[1]}/{i}.out"
    torch.save({"result": value, "after": []}, path)
    try:
        payload = trusted.read_answer(path)
        got = payload["result"]
        results[label] = ["read", str(got.layout), bool(torch.isnan(got.double() if got.is_complex() is False
                                                                      and got.dtype != torch.bool else got.real
                                                                      if got.is_complex() else got.double()).any())]
    except boundary.TooLarge as err:
        results[label] = ["refused", str(err)]
print(json.dumps(results))
'''


def test_every_layout_and_dtype_is_read_as_plain_data_or_refused_and_nothing_crashes(tmp_path):
    import json
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", FUZZ, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the reading process ended with {done.returncode}: {done.stderr[-2000:]}"
    results = json.loads(done.stdout.strip().splitlines()[-1])
    refused = {label for label, (what, *_) in results.items() if what == "refused"}
    assert {"sparse_coo", "malformed sparse indices", "indices past the end", "to_sparse_csr", "to_sparse_csc",
            "sparse_bsr", "nested", "quantized", "meta", "parameter"} <= refused, results  # honest kernels detach
    for label in ("dense", "expanded view", "strided view", "dtype torch.float32", "dtype torch.bool",
                  "dtype torch.complex64"):
        assert results[label][0] == "read" and results[label][1] == "torch.strided", (label, results[label])
    assert all("only" in message or "opcode" in message for what, message, *_ in results.values() if what == "refused")


def test_a_view_past_the_end_of_its_storage_is_refused_before_its_data_is_touched():
    view = torch.zeros(4)[1:3]
    assert boundary.check_plain_tensor(view) is None
    view.untyped_storage().resize_(4)  # the storage shrinks to one float under the view: torch allows it
    with pytest.raises(boundary.TooLarge, match="past the end of its storage"):
        boundary.check_plain_tensor(view)
