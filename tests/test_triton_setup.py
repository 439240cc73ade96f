"""autograder.learner.triton_setup: the interpreter without CUDA, set before triton is imported.

Import order matters (Triton reads TRITON_INTERPRET when it decorates a kernel, or when it is
imported), so each case runs in a fresh Python process; the kernels are in a file because
`triton.jit` reads its function's source.
"""
import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest

from autograder.learner import triton_setup

KERNEL = '''
import triton, triton.language as tl

@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

x = torch.arange(10, dtype=torch.float64, device=device)
add_one[(triton.cdiv(10, 4),)](x, 10, BLOCK=4)
said["result"] = x.tolist()
'''


# Skipped where Triton is not installed, failed instead under CI (tests/conftest.py).
NEEDS_TRITON = pytest.mark.needs(module="triton", reason="Triton is not installed: `pip install triton` (Linux)")


def run(tmp_path, body, **env):
    """Run `body` in a fresh Python (TRITON_INTERPRET unset unless given); return the dict it fills."""
    script = tmp_path / "probe.py"
    script.write_text("import json, os, sys, torch\nfrom autograder.learner import triton_setup\nsaid = {}\n"
                      f"{body}\nprint(json.dumps(said))\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "COURSE_DEVICE")}
    done = subprocess.run([sys.executable, str(script)], env={**clean, **env}, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


@NEEDS_TRITON
def test_without_cuda_the_interpreter_is_set_before_triton_is_imported_and_a_kernel_runs(tmp_path):
    said = run(tmp_path, "said['before'] = 'triton' in sys.modules\nstatus = triton_setup.prepare()\n"
                         "said.update(mode=status.mode, message=status.message, env=os.environ['TRITON_INTERPRET'])\n"
                         "device = 'cpu'\n" + KERNEL, COURSE_DEVICE="cpu")
    assert said["before"] is False and said["env"] == "1" and said["mode"] == "interpreted"
    assert "interpreter" in said["message"] and "RuntimeWarning" not in said["stderr"]
    assert said["result"] == [float(i + 1) for i in range(10)]


@NEEDS_TRITON
def test_triton_imported_first_is_said_and_a_kernel_decorated_after_still_runs(tmp_path):
    said = run(tmp_path, "import triton\nsaid['mode'] = triton_setup.prepare('cpu').mode\ndevice = 'cpu'\n" + KERNEL)
    assert said["mode"] == "interpreted" and "imported before TRITON_INTERPRET=1 was set" in said["stderr"]
    assert said["result"][:2] == [1.0, 2.0]


@NEEDS_TRITON
def test_on_cuda_nothing_is_set_unless_the_interpreter_was_asked_for(tmp_path):
    body = ("status = triton_setup.prepare('cuda')\n"
            "said.update(mode=status.mode, env=os.environ.get('TRITON_INTERPRET'))")
    assert run(tmp_path, body) == {"mode": "compiled", "env": None, "stderr": ""}
    asked = run(tmp_path, body + "\nsaid['message'] = status.message", TRITON_INTERPRET="1")
    assert asked["mode"] == "interpreted" and "TRITON_INTERPRET=1 was set" in asked["message"]


def test_without_a_wheel_it_says_so_and_the_launches_are_skipped(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # restored after the test: prepare sets it
    monkeypatch.setitem(sys.modules, "triton", None)  # as if not installed
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    status = triton_setup.prepare("cpu")
    assert (status.usable, status.mode) == (False, "unavailable")
    assert "no wheel for Darwin arm64" in status.message and "not launched" in status.message
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert "pip install triton" in triton_setup.prepare("cpu").message


@NEEDS_TRITON
def test_an_interpreter_known_to_fail_under_numpy_2_4_is_refused(monkeypatch):
    """Seen with torch 2.10 (`make test-floor`): triton 3.6's interpreter raises in notebook 09's loop over a
    kernel argument under NumPy 2.4, and runs it under NumPy 2.1; 3.7 and later squeeze the array first (3.9
    runs the notebook under NumPy 2.4)."""
    import triton
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(triton_setup.numpy, "__version__", "2.4.6")
    status = triton_setup.prepare("cpu")
    assert not status.usable and "fails with NumPy 2.4.6" in status.message and "numpy<2.4" in status.message
    monkeypatch.setattr(triton, "__version__", "3.7.0")
    assert triton_setup.prepare("cpu").usable
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(triton_setup.numpy, "__version__", "2.1.3")
    assert triton_setup.prepare("cpu").usable


@pytest.mark.gpu
@NEEDS_TRITON
def test_on_cuda_the_kernel_is_compiled_and_runs(tmp_path):
    said = run(tmp_path, "status = triton_setup.prepare()\nsaid['mode'] = status.mode\ndevice = 'cuda'\n" + KERNEL)
    assert said["mode"] == "compiled" and said["result"] == [float(i + 1) for i in range(10)]


@NEEDS_TRITON
def test_a_kernel_in_executed_source_compiles_once_its_lines_are_kept(tmp_path):
    """The mutation suite and benchmarks/kernels.py execute notebook cells: a compiled (GPU) `@triton.jit`
    reads its function's source, which `exec` alone does not keep (seen on an H100: "@jit functions should
    be defined in a Python file"); `mutation.compiled` keeps it, as IPython does for a cell."""
    body = (f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\nimport mutation\n"
            "source = 'import triton\\n@triton.jit\\ndef k(x_ptr):\\n    pass\\n'\n"
            "for name, code in (('plain', compile(source, '<plain>', 'exec')),\n"
            "                   ('kept', mutation.compiled(source, '<kept>'))):\n"
            "    try:\n        space = {}\n        exec(code, space)\n        said[name] = type(space['k']).__name__\n"
            "    except ValueError as err:\n        said[name] = str(err)\n")
    said = run(tmp_path, body)  # TRITON_INTERPRET unset: the kernel is a JITFunction, as on a GPU
    assert said["kept"] == "JITFunction" and "defined in a Python file" in said["plain"]
